/* SPDX-License-Identifier: GPL-2.0 OR Linux-OpenIB */
/*
 * rxe_ib: an InfiniBand link layer for rdma_rxe, for testing.
 *
 * A device made with "rdma link add NAME type rxe_ib netdev ETH" presents a
 * port of the InfiniBand link layer: a subnet manager (opensm) assigns its
 * LID and P_Keys through the SMA below, and its packets cross the Ethernet
 * link as LRH [GRH] BTH ... ICRC in frames of ethertype 0x88B5, between
 * exactly two such ports (a cable, no switch). It exists so that the IB
 * management stack (ib_mad, ib_sa, ib_cm, ib_umad) and IPoIB can be tested
 * without InfiniBand hardware.
 */

#ifndef RXE_IB_H
#define RXE_IB_H

#include <linux/unaligned.h>

#define RXE_IB_ETHERTYPE	0x88B5	/* IEEE local experimental */
#define RXE_IB_LRH_BYTES	8
#define RXE_IB_GRH_BYTES	40
#define RXE_IB_LNH_LOCAL	2
#define RXE_IB_LNH_GLOBAL	3
#define RXE_IB_VL_SMP		15

/*
 * Where an address vector of an rxe_ib device keeps its LRH fields. On such a
 * device the destination IP address of the (uapi) struct rxe_av has no use,
 * so its storage carries these instead.
 */
struct rxe_ib_av {
	u16	dlid;
	u8	sl;
	u8	src_path_bits;
	u8	has_grh;
};

static inline struct rxe_ib_av *rxe_ib_av(struct rxe_av *av)
{
	BUILD_BUG_ON(sizeof(struct rxe_ib_av) > sizeof(av->dgid_addr));
	return (struct rxe_ib_av *)&av->dgid_addr;
}

#ifdef CONFIG_RDMA_RXE_IB

static inline bool rxe_is_ib(const struct rxe_dev *rxe)
{
	return rxe->ib_mode;
}

void rxe_ib_init_port(struct rxe_dev *rxe, struct net_device *ndev);
void rxe_ib_set_ops(struct ib_device *dev);
void rxe_ib_port_up(struct rxe_dev *rxe);
void rxe_ib_port_down(struct rxe_dev *rxe);
void rxe_ib_update_mtu(struct rxe_dev *rxe);
u16 rxe_ib_pkey(struct rxe_dev *rxe, u16 index);

/* address vectors */
int rxe_ib_chk_ah_attr(struct rxe_dev *rxe, struct rdma_ah_attr *attr);
void rxe_ib_init_av(struct rdma_ah_attr *attr, struct rxe_av *av);
void rxe_ib_av_to_attr(struct rxe_av *av, struct rdma_ah_attr *attr);

/* the wire */
struct sk_buff *rxe_ib_init_packet(struct rxe_dev *rxe, struct rxe_av *av,
				   int paylen, struct rxe_pkt_info *pkt);
int rxe_ib_prepare(struct rxe_av *av, struct rxe_pkt_info *pkt,
		   struct sk_buff *skb);
int rxe_ib_send(struct rxe_dev *rxe, struct sk_buff *skb);
int rxe_ib_loopback(struct rxe_dev *rxe, struct sk_buff *skb);
int rxe_ib_chk_lrh(struct rxe_pkt_info *pkt, struct sk_buff *skb);
void rxe_ib_recv_grh(struct sk_buff *skb, struct rxe_pkt_info *pkt,
		     union rdma_network_hdr *hdr);
void rxe_ib_complete_wc(struct sk_buff *skb, struct rxe_pkt_info *pkt,
			struct ib_wc *wc);
void rxe_ib_complete_uwc(struct sk_buff *skb, struct rxe_pkt_info *pkt,
			 struct ib_uverbs_wc *uwc);
int rxe_ib_net_init(void);
void rxe_ib_net_exit(void);

#else /* !CONFIG_RDMA_RXE_IB: no device is of the IB link layer */

static inline bool rxe_is_ib(const struct rxe_dev *rxe)
{
	return false;
}

static inline void rxe_ib_init_port(struct rxe_dev *rxe,
				    struct net_device *ndev) {}
static inline void rxe_ib_set_ops(struct ib_device *dev) {}
static inline void rxe_ib_port_up(struct rxe_dev *rxe) {}
static inline void rxe_ib_port_down(struct rxe_dev *rxe) {}
static inline void rxe_ib_update_mtu(struct rxe_dev *rxe) {}
static inline u16 rxe_ib_pkey(struct rxe_dev *rxe, u16 index)
{
	return 0;
}

static inline int rxe_ib_chk_ah_attr(struct rxe_dev *rxe,
				     struct rdma_ah_attr *attr)
{
	return -EINVAL;
}

static inline void rxe_ib_init_av(struct rdma_ah_attr *attr,
				  struct rxe_av *av) {}
static inline void rxe_ib_av_to_attr(struct rxe_av *av,
				     struct rdma_ah_attr *attr) {}

static inline struct sk_buff *rxe_ib_init_packet(struct rxe_dev *rxe,
						 struct rxe_av *av, int paylen,
						 struct rxe_pkt_info *pkt)
{
	return NULL;
}

static inline int rxe_ib_prepare(struct rxe_av *av, struct rxe_pkt_info *pkt,
				 struct sk_buff *skb)
{
	return -EINVAL;
}

static inline int rxe_ib_send(struct rxe_dev *rxe, struct sk_buff *skb)
{
	return -EINVAL;
}

static inline int rxe_ib_loopback(struct rxe_dev *rxe, struct sk_buff *skb)
{
	return -EINVAL;
}

static inline int rxe_ib_chk_lrh(struct rxe_pkt_info *pkt, struct sk_buff *skb)
{
	return -EINVAL;
}

static inline void rxe_ib_recv_grh(struct sk_buff *skb,
				   struct rxe_pkt_info *pkt,
				   union rdma_network_hdr *hdr) {}
static inline void rxe_ib_complete_wc(struct sk_buff *skb,
				      struct rxe_pkt_info *pkt,
				      struct ib_wc *wc) {}
static inline void rxe_ib_complete_uwc(struct sk_buff *skb,
				       struct rxe_pkt_info *pkt,
				       struct ib_uverbs_wc *uwc) {}
static inline int rxe_ib_net_init(void)
{
	return 0;
}

static inline void rxe_ib_net_exit(void) {}

#endif /* CONFIG_RDMA_RXE_IB */

/*
 * An InfiniBand link does not lose packets (credit-based flow control), so
 * IB consumers may ask for no transport retries at all (IPoIB's connected
 * mode does); the Ethernet link under rxe_ib does lose some. Lost packets
 * are repaired by the transport's retries instead: a QP of an rxe_ib device
 * retries at least this often whatever it was set to (7 would mean forever).
 */
#define RXE_IB_LINK_RETRIES	6

static inline u8 rxe_qp_retry_cnt(struct rxe_qp *qp)
{
	if (!rxe_is_ib(to_rdev(qp->ibqp.device)))
		return qp->attr.retry_cnt;
	return max_t(u8, qp->attr.retry_cnt, RXE_IB_LINK_RETRIES);
}

static inline const u8 *rxe_ib_lrh(struct sk_buff *skb)
{
	return skb_network_header(skb);
}

static inline u16 rxe_ib_lrh_dlid(const u8 *lrh)
{
	return get_unaligned_be16(lrh + 2);
}

static inline u16 rxe_ib_lrh_slid(const u8 *lrh)
{
	return get_unaligned_be16(lrh + 6);
}

static inline u8 rxe_ib_lrh_sl(const u8 *lrh)
{
	return lrh[1] >> 4;
}

#endif /* RXE_IB_H */
