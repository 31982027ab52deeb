/*
 * giw_devices: goiwarp's devices as ibv_devices lists them (name, node GUID),
 * with the network interface each one is bound to and its addresses.
 * `goiwarp devices` runs it.
 *
 *   giw_devices
 *
 * A device is named giw_<ifname> (DESIGN.md, "Devices"), so the interface is
 * the name without its prefix; its addresses come from getifaddrs(), which
 * is where the library finds them too.
 */
#include <arpa/inet.h>
#include <endian.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include <infiniband/verbs.h>

#define GIW_PREFIX "giw_"

/* The IPv4 and IPv6 addresses of ifname, space-separated; "-" for none. */
static void print_addrs(const struct ifaddrs *ifs, const char *ifname)
{
	char buf[INET6_ADDRSTRLEN];
	int n = 0;

	for (const struct ifaddrs *a = ifs; a && ifname; a = a->ifa_next) {
		const void *ip;

		if (!a->ifa_addr || strcmp(a->ifa_name, ifname) != 0)
			continue;
		if (a->ifa_addr->sa_family == AF_INET)
			ip = &((const struct sockaddr_in *)a->ifa_addr)->sin_addr;
		else if (a->ifa_addr->sa_family == AF_INET6)
			ip = &((const struct sockaddr_in6 *)a->ifa_addr)->sin6_addr;
		else
			continue;
		if (inet_ntop(a->ifa_addr->sa_family, ip, buf, sizeof(buf)))
			printf("%s%s", n++ ? " " : "", buf);
	}
	if (!n)
		printf("-");
}

int main(int argc, char **argv)
{
	struct ifaddrs *ifs = NULL;
	struct ibv_device **list;
	int n;

	if (argc > 1) {
		fprintf(stderr, "usage: %s\n", argv[0]);
		return 2;
	}
	list = ibv_get_device_list(&n);
	if (!list) {
		perror("ibv_get_device_list");
		return 1;
	}
	/* without addresses the devices are still worth listing */
	if (getifaddrs(&ifs))
		perror("getifaddrs");
	printf("    %-16s\t   node GUID    \t%-16s\t%s\n", "device", "interface", "addresses");
	printf("    %-16s\t----------------\t%-16s\t%s\n", "------", "---------", "---------");
	for (int i = 0; i < n; i++) {
		const char *name = ibv_get_device_name(list[i]);
		const char *ifname = NULL;

		if (!strncmp(name, GIW_PREFIX, strlen(GIW_PREFIX)))
			ifname = name + strlen(GIW_PREFIX);
		printf("    %-16s\t%016llx\t%-16s\t", name,
		       (unsigned long long)be64toh(ibv_get_device_guid(list[i])), ifname ? ifname : "-");
		print_addrs(ifs, ifname);
		putchar('\n');
	}
	if (ifs)
		freeifaddrs(ifs);
	ibv_free_device_list(list);
	return 0;
}
