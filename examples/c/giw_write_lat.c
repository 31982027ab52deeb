/* giw_write_lat: perftest-style write latency over goiwarp (see giw_perf.h, -h). */
#include "giw_perf.h"

int main(int argc, char **argv)
{
	return giw_perf_main(argc, argv, GIW_WRITE, GIW_LAT, "giw_write_lat");
}
