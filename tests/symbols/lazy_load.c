/* lazy_load: libgoiwarp.so.1 (the loader shim, capi/loader/) must not load the
 * Go core at program start -- so a process may fork before its first RDMA call
 * -- and must load it at the first API call. Checked in /proc/self/maps. */
#include <infiniband/verbs.h>
#include <stdio.h>
#include <string.h>

static int mapped(const char *name)
{
	char line[4096];
	int found = 0;
	FILE *f = fopen("/proc/self/maps", "r");
	if (!f) {
		perror("lazy_load: /proc/self/maps");
		return -1;
	}
	while (fgets(line, sizeof line, f))
		if (strstr(line, name))
			found = 1;
	fclose(f);
	return found;
}

int main(void)
{
	int shim = mapped("/libgoiwarp.so"), core = mapped("/libgoiwarp-core.so");
	if (shim != 1) {
		fprintf(stderr, "FAIL: libgoiwarp.so.1 (the shim) is not mapped at start\n");
		return 1;
	}
	if (core != 0) {
		fprintf(stderr, "FAIL: libgoiwarp-core.so.1 is mapped before the first API call\n");
		return 1;
	}
	int n = -1;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n < 1) {
		fprintf(stderr, "FAIL: ibv_get_device_list: %p, %d devices\n", (void *)list, n);
		return 1;
	}
	const char *first = ibv_get_device_name(list[0]);
	ibv_free_device_list(list);
	if (mapped("/libgoiwarp-core.so") != 1) {
		fprintf(stderr, "FAIL: libgoiwarp-core.so.1 is not mapped after ibv_get_device_list\n");
		return 1;
	}
	printf("ok: core not mapped at start, mapped after the first call (%d devices, first %s)\n", n,
	       first ? first : "?");
	return 0;
}
