/*
 * Real-world style calls. Compiled against our headers and against
 * rdma-core's; both objects must import exactly the same symbols
 * (the inline/macro routing decides which names a binary imports).
 */
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

int snippet(struct rdma_cm_id *id, struct ibv_qp *qp, struct ibv_pd *pd,
	    struct ibv_cq *cq, void *buf, size_t len, unsigned int dyn_access);

int snippet(struct rdma_cm_id *id, struct ibv_qp *qp, struct ibv_pd *pd,
	    struct ibv_cq *cq, void *buf, size_t len, unsigned int dyn_access)
{
	struct ibv_sge sge = { (uintptr_t)buf, (uint32_t)len, 0 };
	struct ibv_send_wr swr, *bad_swr;
	struct ibv_recv_wr rwr, *bad_rwr;
	struct ibv_wc wc;
	struct ibv_port_attr pattr;
	struct ibv_gid_entry gent;
	struct ibv_device_attr_ex dattr;
	struct ibv_qp_init_attr_ex qattr;
	struct ibv_cq_init_attr_ex cattr;
	struct ibv_qp_ex *qpx;
	struct ibv_mr *mr1, *mr2, *mr3, *mr4;
	int n = 0;

	memset(&swr, 0, sizeof(swr));
	memset(&rwr, 0, sizeof(rwr));
	memset(&qattr, 0, sizeof(qattr));
	memset(&cattr, 0, sizeof(cattr));
	swr.sg_list = &sge;
	swr.num_sge = 1;
	swr.opcode = IBV_WR_RDMA_WRITE;
	rwr.sg_list = &sge;
	rwr.num_sge = 1;

	n += ibv_post_send(qp, &swr, &bad_swr);
	n += ibv_post_recv(qp, &rwr, &bad_rwr);
	n += ibv_poll_cq(cq, 1, &wc);
	n += ibv_req_notify_cq(cq, 0);

	mr1 = ibv_reg_mr(pd, buf, len, IBV_ACCESS_LOCAL_WRITE);
	mr2 = ibv_reg_mr(pd, buf, len, IBV_ACCESS_LOCAL_WRITE |
			 IBV_ACCESS_RELAXED_ORDERING);
	mr3 = ibv_reg_mr(pd, buf, len, dyn_access);
	mr4 = ibv_reg_mr_iova(pd, buf, len, 0, IBV_ACCESS_REMOTE_READ);
	n += (mr1 != NULL) + (mr2 != NULL) + (mr3 != NULL) + (mr4 != NULL);

	n += ibv_query_port(qp->context, 1, &pattr);
	n += ibv_query_gid_ex(qp->context, 1, 0, &gent, 0);
	n += ibv_query_device_ex(qp->context, NULL, &dattr);
	qattr.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	qattr.pd = pd;
	n += ibv_create_qp_ex(qp->context, &qattr) != NULL;
	n += ibv_create_cq_ex(qp->context, &cattr) != NULL;

	qpx = ibv_qp_to_qp_ex(qp);
	ibv_wr_start(qpx);
	ibv_wr_rdma_write(qpx, 0x1234, 0x1000);
	ibv_wr_set_sge(qpx, 0, (uintptr_t)buf, (uint32_t)len);
	n += ibv_wr_complete(qpx);

	n += rdma_post_send(id, NULL, buf, len, mr1, IBV_SEND_SIGNALED);
	n += rdma_post_recv(id, NULL, buf, len, mr1);
	n += rdma_post_write(id, NULL, buf, len, mr1, 0, 0x1000, 0x1234);
	n += rdma_post_read(id, NULL, buf, len, mr1, 0, 0x1000, 0x1234);
	n += rdma_get_send_comp(id, &wc);
	n += rdma_get_recv_comp(id, &wc);
	n += rdma_reg_msgs(id, buf, len) != NULL;
	n += rdma_dereg_mr(mr1);
	return n;
}
