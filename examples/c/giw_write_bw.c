/* giw_write_bw: perftest-style write bandwidth over goiwarp (see giw_perf.h, -h). */
#include "giw_perf.h"

int main(int argc, char **argv)
{
	return giw_perf_main(argc, argv, GIW_WRITE, GIW_BW, "giw_write_bw");
}
