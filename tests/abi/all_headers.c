/* Compile check: every public header, every static inline instantiated
 * (-fkeep-inline-functions), warning-free as C11 and as C++17. */
#include <infiniband/verbs.h>
#include <infiniband/verbs_api.h>
#include <infiniband/ib_user_ioctl_verbs.h>
#include <infiniband/sa.h>
#include <infiniband/arch.h>
#include <rdma/ib_user_verbs.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <goiwarp.h>

/* Headers must be idempotent. */
#include <infiniband/verbs.h>
#include <rdma/rdma_verbs.h>

int main(void)
{
	return 0;
}
