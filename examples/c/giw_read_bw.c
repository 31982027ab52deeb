/* giw_read_bw: perftest-style read bandwidth over goiwarp (see giw_perf.h, -h). */
#include "giw_perf.h"

int main(int argc, char **argv)
{
	return giw_perf_main(argc, argv, GIW_READ, GIW_BW, "giw_read_bw");
}
