/* giw_send_bw: perftest-style send bandwidth over goiwarp (see giw_perf.h, -h). */
#include "giw_perf.h"

int main(int argc, char **argv)
{
	return giw_perf_main(argc, argv, GIW_SEND, GIW_BW, "giw_send_bw");
}
