/*
 * giw_stat: print goiwarp's provider attributes and the per-device counters
 * (include/goiwarp.h: giw_query_provider, giw_query_counters).
 *
 *   giw_stat [-d DEVICE]
 *
 * The counters live in the process that uses the devices (they count that
 * process's connections since it started), so a standalone giw_stat shows its
 * own, mostly zero, counters: it is the reference for the calls, which a
 * program embeds where it wants its statistics (at exit, on a signal, ...).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <goiwarp.h>

static void print_provider(struct ibv_context *ctx)
{
	struct giw_provider_attr a;

	if (giw_query_provider(ctx, &a)) {
		perror("giw_query_provider");
		return;
	}
	printf("provider %s (api %u): MPA rev %u, CRC %s, markers %s, peer-to-peer %s, "
	       "private data <= %u B, MPA timeout %u ms, socket attach %s\n",
	       a.name, a.api_version, a.mpa_revision, a.crc ? "requested" : "if the peer asks",
	       a.markers ? "requested" : "off", a.peer_to_peer ? "on" : "off", a.max_private_data,
	       a.exchange_timeout_ms, a.socket_attach ? "yes" : "no");
}

static void print_counters(const struct giw_counters *c)
{
	printf("%-16s %12llu %14llu %12llu %14llu %6llu %6llu %8llu %6llu %6llu\n", c->device,
	       (unsigned long long)c->tx_fpdus, (unsigned long long)c->tx_bytes,
	       (unsigned long long)c->rx_fpdus, (unsigned long long)c->rx_bytes,
	       (unsigned long long)c->terminates_sent, (unsigned long long)c->terminates_received,
	       (unsigned long long)c->retransmits, (unsigned long long)c->connections,
	       (unsigned long long)c->active_connections);
}

int main(int argc, char **argv)
{
	const char *only = NULL;
	struct ibv_device **list;
	int n = 0, opt, shown = 0, header = 0;

	while ((opt = getopt(argc, argv, "d:h")) != -1) {
		switch (opt) {
		case 'd':
			only = optarg;
			break;
		default:
			fprintf(stderr, "usage: %s [-d DEVICE]\n", argv[0]);
			return opt == 'h' ? 0 : 2;
		}
	}
	list = ibv_get_device_list(&n);
	if (!list) {
		perror("ibv_get_device_list");
		return 1;
	}
	for (int i = 0; i < n; i++) {
		const char *name = ibv_get_device_name(list[i]);
		struct ibv_context *ctx;
		struct giw_counters c;

		if (only && strcmp(only, name) != 0)
			continue;
		ctx = ibv_open_device(list[i]);
		if (!ctx) {
			fprintf(stderr, "%s: ibv_open_device failed\n", name);
			continue;
		}
		if (!header) {
			print_provider(ctx);
			printf("%-16s %12s %14s %12s %14s %6s %6s %8s %6s %6s\n", "device", "tx_fpdus",
			       "tx_bytes", "rx_fpdus", "rx_bytes", "term_tx", "term_rx", "retrans", "conns",
			       "active");
			header = 1;
		}
		if (giw_query_counters(ctx, &c) == 0) {
			print_counters(&c);
			shown++;
		} else {
			perror("giw_query_counters");
		}
		ibv_close_device(ctx);
	}
	ibv_free_device_list(list);
	if (!shown) {
		fprintf(stderr, "no device%s%s\n", only ? " " : "", only ? only : "");
		return 1;
	}
	return 0;
}
