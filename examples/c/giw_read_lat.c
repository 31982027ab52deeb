/* giw_read_lat: perftest-style read latency over goiwarp (see giw_perf.h, -h). */
#include "giw_perf.h"

int main(int argc, char **argv)
{
	return giw_perf_main(argc, argv, GIW_READ, GIW_LAT, "giw_read_lat");
}
