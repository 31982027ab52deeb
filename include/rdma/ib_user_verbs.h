/*
 * goiwarp: the small part of the kernel uverbs ABI (rdma/ib_user_verbs.h)
 * that the user-space verbs headers refer to. Layouts match the kernel UAPI.
 */
#ifndef IB_USER_VERBS_H
#define IB_USER_VERBS_H

#include <linux/types.h>

#define IB_USER_VERBS_ABI_VERSION 6
#define IB_USER_VERBS_CMD_THRESHOLD 50

/* Kernel reply to QUERY_PORT; embedded in ib_uverbs_query_port_resp_ex. */
struct ib_uverbs_query_port_resp {
	__u32 port_cap_flags;
	__u32 max_msg_sz;
	__u32 bad_pkey_cntr;
	__u32 qkey_viol_cntr;
	__u32 gid_tbl_len;
	__u16 pkey_tbl_len;
	__u16 lid;
	__u16 sm_lid;
	__u8 state;
	__u8 max_mtu;
	__u8 active_mtu;
	__u8 lmc;
	__u8 max_vl_num;
	__u8 sm_sl;
	__u8 subnet_timeout;
	__u8 init_type_reply;
	__u8 active_width;
	__u8 active_speed;
	__u8 phys_state;
	__u8 link_layer;
	__u8 flags;
	__u8 reserved;
};

#endif /* IB_USER_VERBS_H */
