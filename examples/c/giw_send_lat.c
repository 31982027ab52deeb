/* giw_send_lat: perftest-style send latency over goiwarp (see giw_perf.h, -h). */
#include "giw_perf.h"

int main(int argc, char **argv)
{
	return giw_perf_main(argc, argv, GIW_SEND, GIW_LAT, "giw_send_lat");
}
