// SPDX-License-Identifier: GPL-2.0 OR Linux-OpenIB
/*
 * rxe_ib: the InfiniBand link layer of rdma_rxe, for testing (see rxe_ib.h).
 *
 * This file holds what differs from RoCE: the port as the subnet manager
 * sees it (the SMA answering subnet management packets on QP0), the port
 * attributes the core reads, and the framing of packets on the Ethernet
 * link. Everything else (queue pairs, transport, completions) is rxe's.
 */

#include <linux/etherdevice.h>
#include <linux/if_ether.h>
#include <linux/netdevice.h>
#include <linux/unaligned.h>
#include <rdma/ib_mad.h>
#include <rdma/ib_smi.h>

#include "rxe.h"
#include "rxe_loc.h"
#include "rxe_ib.h"

/* What the port reports as its link: 4X QDR, whatever the Ethernet speed. */
#define RXE_IB_WIDTH_SUPPORTED	(1 | 2)		/* 1X, 4X */
#define RXE_IB_WIDTH_ACTIVE	2		/* 4X */
#define RXE_IB_SPEED_SUPPORTED	(1 | 2 | 4)	/* SDR, DDR, QDR */
#define RXE_IB_SPEED_ACTIVE	4		/* QDR */
#define RXE_IB_VL_CAP		1		/* VL0 only */
#define RXE_IB_PHYS_LINKUP	5
#define RXE_IB_PHYS_DISABLED	3
#define RXE_IB_RESP_TIME	18
#define RXE_IB_PORT_CAP_FLAGS	(IB_PORT_CM_SUP | IB_PORT_CLIENT_REG_SUP | \
				 IB_PORT_SYS_IMAGE_GUID_SUP)

#define RXE_IB_GRH_NEXT_HDR	0x1b

static u16 rxe_ib_lmc_mask(u8 lmc)
{
	return (1 << lmc) - 1;
}

u16 rxe_ib_pkey(struct rxe_dev *rxe, u16 index)
{
	if (index >= RXE_IB_PKEY_TBL_LEN)
		return 0;
	return READ_ONCE(rxe->port.ib.pkeys[index]);
}

static void rxe_ib_event(struct rxe_dev *rxe, enum ib_event_type type)
{
	struct ib_event ev = {
		.device = &rxe->ib_dev,
		.element.port_num = 1,
		.event = type,
	};

	/* The tests read what the SM caused from the kernel log. */
	dev_info(&rxe->ib_dev.dev, "port event %s\n", ib_event_msg(type));
	ib_dispatch_event(&ev);
}

/* Port */

void rxe_ib_init_port(struct rxe_dev *rxe, struct net_device *ndev)
{
	struct rxe_port *port = &rxe->port;
	struct rxe_ib_port *ib = &port->ib;

	/*
	 * Sit where an adapter would, on the device of the Ethernet interface
	 * (its PCI or virtio function): IPoIB links its interfaces to it and
	 * reports it as their bus.
	 */
	rxe->ib_dev.dev.parent = ndev->dev.parent;

	/*
	 * The port GUID must differ from the node GUID, which rxe derives from
	 * the same MAC address: the EUI-64 filler 0xfe becomes 0xff.
	 */
	((u8 *)&port->port_guid)[4] ^= 0x01;

	memset(ib, 0, sizeof(*ib));
	ib->pkeys[0] = IB_DEFAULT_PKEY_FULL;
	ib->op_vls = RXE_IB_VL_CAP;
	ib->neighbor_mtu = IB_MTU_4096;
	ib->link_width_enabled = RXE_IB_WIDTH_SUPPORTED;
	ib->link_speed_enabled = RXE_IB_SPEED_SUPPORTED;

	port->attr.port_cap_flags = RXE_IB_PORT_CAP_FLAGS;
	port->attr.pkey_tbl_len = RXE_IB_PKEY_TBL_LEN;
	port->attr.gid_tbl_len = 1;
	port->attr.lid = 0;
	port->attr.sm_lid = 0;
	port->attr.lmc = 0;
	port->attr.max_vl_num = RXE_IB_VL_CAP;
	port->attr.subnet_timeout = 0;
	port->attr.state = IB_PORT_DOWN;
}

/* Active MTU: the smaller of what the Ethernet link carries and what the SM set. */
void rxe_ib_update_mtu(struct rxe_dev *rxe)
{
	struct rxe_port *port = &rxe->port;
	enum ib_mtu mtu = min_t(enum ib_mtu, port->attr.max_mtu,
				port->ib.neighbor_mtu);

	port->attr.active_mtu = mtu;
	port->mtu_cap = ib_mtu_enum_to_int(mtu);
}

/* The Ethernet link came up: the port trains to INIT and waits for the SM. */
void rxe_ib_port_up(struct rxe_dev *rxe)
{
	struct rxe_port *port = &rxe->port;
	unsigned long flags;
	bool trained;

	spin_lock_irqsave(&port->port_lock, flags);
	trained = port->attr.state == IB_PORT_DOWN;
	if (trained)
		port->attr.state = IB_PORT_INIT;
	spin_unlock_irqrestore(&port->port_lock, flags);
	if (trained)
		dev_info(&rxe->ib_dev.dev, "link up, port INIT\n");
}

void rxe_ib_port_down(struct rxe_dev *rxe)
{
	struct rxe_port *port = &rxe->port;
	enum ib_port_state old;
	unsigned long flags;

	spin_lock_irqsave(&port->port_lock, flags);
	old = port->attr.state;
	port->attr.state = IB_PORT_DOWN;
	spin_unlock_irqrestore(&port->port_lock, flags);

	if (old == IB_PORT_DOWN)
		return;
	dev_info(&rxe->ib_dev.dev, "link down, port DOWN\n");
	rxe_ib_event(rxe, IB_EVENT_PORT_ERR);
	rxe_counter_inc(rxe, RXE_CNT_LINK_DOWNED);
}

static bool rxe_ib_link_up(struct rxe_dev *rxe)
{
	struct net_device *ndev = rxe_ib_device_get_netdev(&rxe->ib_dev);
	bool up;

	if (!ndev)
		return false;
	up = netif_running(ndev) && netif_carrier_ok(ndev);
	dev_put(ndev);
	return up;
}

/* Verbs of the port */

static enum rdma_link_layer rxe_ib_get_link_layer(struct ib_device *ibdev,
						  u32 port_num)
{
	return IB_LINK_LAYER_INFINIBAND;
}

static int rxe_ib_port_immutable(struct ib_device *ibdev, u32 port_num,
				 struct ib_port_immutable *immutable)
{
	if (port_num != 1)
		return -EINVAL;

	immutable->core_cap_flags = RDMA_CORE_PORT_IBA_IB;
	immutable->pkey_tbl_len = RXE_IB_PKEY_TBL_LEN;
	immutable->gid_tbl_len = 1;
	immutable->max_mad_size = IB_MGMT_MAD_SIZE;
	return 0;
}

static int rxe_ib_query_port(struct ib_device *ibdev, u32 port_num,
			     struct ib_port_attr *attr)
{
	struct rxe_dev *rxe = to_rdev(ibdev);
	struct rxe_port *port = &rxe->port;
	unsigned long flags;

	if (port_num != 1)
		return -EINVAL;

	spin_lock_irqsave(&port->port_lock, flags);
	memcpy(attr, &port->attr, sizeof(*attr));
	attr->subnet_prefix = be64_to_cpu(port->subnet_prefix);
	spin_unlock_irqrestore(&port->port_lock, flags);

	attr->active_width = IB_WIDTH_4X;
	attr->active_speed = IB_SPEED_QDR;
	attr->phys_state = rxe_ib_link_up(rxe) ? IB_PORT_PHYS_STATE_LINK_UP :
						 IB_PORT_PHYS_STATE_DISABLED;
	return 0;
}

static int rxe_ib_query_gid(struct ib_device *ibdev, u32 port_num, int index,
			    union ib_gid *gid)
{
	struct rxe_dev *rxe = to_rdev(ibdev);

	if (port_num != 1 || index != 0)
		return -EINVAL;

	gid->global.subnet_prefix = READ_ONCE(rxe->port.subnet_prefix);
	gid->global.interface_id = rxe->port.port_guid;
	return 0;
}

static int rxe_ib_query_pkey(struct ib_device *ibdev, u32 port_num, u16 index,
			     u16 *pkey)
{
	if (port_num != 1 || index >= RXE_IB_PKEY_TBL_LEN)
		return -EINVAL;

	*pkey = rxe_ib_pkey(to_rdev(ibdev), index);
	return 0;
}

/* The SMA: subnet management packets addressed to this port */

struct rxe_ib_events {
	bool lid, sm, rereg, gid, pkey, active, err;
};

static void rxe_ib_raise(struct rxe_dev *rxe, const struct rxe_ib_events *ev)
{
	if (ev->err)
		rxe_ib_event(rxe, IB_EVENT_PORT_ERR);
	if (ev->lid)
		rxe_ib_event(rxe, IB_EVENT_LID_CHANGE);
	if (ev->gid)
		rxe_ib_event(rxe, IB_EVENT_GID_CHANGE);
	if (ev->pkey)
		rxe_ib_event(rxe, IB_EVENT_PKEY_CHANGE);
	if (ev->sm)
		rxe_ib_event(rxe, IB_EVENT_SM_CHANGE);
	if (ev->active)
		rxe_ib_event(rxe, IB_EVENT_PORT_ACTIVE);
	if (ev->rereg)
		rxe_ib_event(rxe, IB_EVENT_CLIENT_REREGISTER);
}

static u16 rxe_ib_node_info(struct rxe_dev *rxe, struct ib_smp *smp)
{
	struct ib_node_info *ni = (struct ib_node_info *)smp->data;
	u32 vendor = rxe->attr.vendor_id;

	if (smp->attr_mod)
		return IB_MGMT_MAD_STATUS_INVALID_ATTRIB_VALUE;

	ni->base_version = IB_MGMT_BASE_VERSION;
	ni->class_version = 1;
	ni->node_type = RDMA_NODE_IB_CA;
	ni->num_ports = 1;
	ni->sys_guid = rxe->attr.sys_image_guid;
	ni->node_guid = rxe->ib_dev.node_guid;
	ni->port_guid = rxe->port.port_guid;
	ni->partition_cap = cpu_to_be16(RXE_IB_PKEY_TBL_LEN);
	ni->device_id = 0;
	ni->revision = 0;
	ni->local_port_num = 1;
	ni->vendor_id[0] = vendor >> 16;
	ni->vendor_id[1] = vendor >> 8;
	ni->vendor_id[2] = vendor;
	return 0;
}

static u16 rxe_ib_guid_info(struct rxe_dev *rxe, struct ib_smp *smp)
{
	if (smp->attr_mod)
		return IB_MGMT_MAD_STATUS_INVALID_ATTRIB_VALUE;

	memcpy(smp->data, &rxe->port.port_guid, sizeof(rxe->port.port_guid));
	return 0;
}

/* Fills PortInfo; the caller holds port_lock. */
static void rxe_ib_fill_port_info(struct rxe_dev *rxe, bool link_up,
				  struct ib_port_info *pi)
{
	struct rxe_port *port = &rxe->port;
	struct rxe_ib_port *ib = &port->ib;

	memset(pi, 0, sizeof(*pi));
	pi->mkey = cpu_to_be64(ib->mkey);
	pi->gid_prefix = port->subnet_prefix;
	pi->lid = cpu_to_be16(port->attr.lid);
	pi->sm_lid = cpu_to_be16(port->attr.sm_lid);
	pi->cap_mask = cpu_to_be32(port->attr.port_cap_flags);
	pi->mkey_lease_period = cpu_to_be16(ib->mkey_lease);
	pi->local_port_num = 1;
	pi->link_width_enabled = ib->link_width_enabled;
	pi->link_width_supported = RXE_IB_WIDTH_SUPPORTED;
	pi->link_width_active = RXE_IB_WIDTH_ACTIVE;
	pi->linkspeed_portstate = (RXE_IB_SPEED_SUPPORTED << 4) |
				  port->attr.state;
	pi->portphysstate_linkdown = ((link_up ? RXE_IB_PHYS_LINKUP :
					RXE_IB_PHYS_DISABLED) << 4) | 2;
	pi->mkeyprot_resv_lmc = (ib->mkey_prot << 6) | port->attr.lmc;
	pi->linkspeedactive_enabled = (RXE_IB_SPEED_ACTIVE << 4) |
				      ib->link_speed_enabled;
	pi->neighbormtu_mastersmsl = (ib->neighbor_mtu << 4) |
				     port->attr.sm_sl;
	pi->vlcap_inittype = RXE_IB_VL_CAP << 4;
	pi->vl_high_limit = ib->vl_high_limit;
	pi->vl_arb_high_cap = 8;
	pi->vl_arb_low_cap = 8;
	pi->inittypereply_mtucap = port->attr.max_mtu;
	pi->vlstallcnt_hoqlife = ib->hoq_life;
	pi->operationalvl_pei_peo_fpi_fpo = ib->op_vls << 4;
	pi->pkey_violations = cpu_to_be16(port->attr.bad_pkey_cntr);
	pi->qkey_violations = cpu_to_be16(port->attr.qkey_viol_cntr);
	pi->guid_cap = 1;
	pi->clientrereg_resv_subnetto = port->attr.subnet_timeout;
	pi->resv_resptimevalue = RXE_IB_RESP_TIME;
}

/* Checks a PortInfo Set as a whole before any of it applies. */
static bool rxe_ib_port_info_valid(struct rxe_dev *rxe,
				   const struct ib_port_info *pi)
{
	struct rxe_port *port = &rxe->port;
	u8 state = pi->linkspeed_portstate & 0xf;
	u8 mtu = pi->neighbormtu_mastersmsl >> 4;
	u8 vls = pi->operationalvl_pei_peo_fpi_fpo >> 4;
	u16 lid = be16_to_cpu(pi->lid);
	u16 sm_lid = be16_to_cpu(pi->sm_lid);

	if (lid >= be16_to_cpu(IB_MULTICAST_LID_BASE) ||
	    sm_lid >= be16_to_cpu(IB_MULTICAST_LID_BASE))
		return false;
	if (mtu < IB_MTU_256 || mtu > port->attr.max_mtu)
		return false;
	if (vls > RXE_IB_VL_CAP)
		return false;

	switch (state) {
	case IB_PORT_NOP:
	case IB_PORT_DOWN:
		return true;
	case IB_PORT_ARMED:
		return port->attr.state == IB_PORT_INIT ||
		       port->attr.state == IB_PORT_ARMED;
	case IB_PORT_ACTIVE:
		return port->attr.state == IB_PORT_ARMED ||
		       port->attr.state == IB_PORT_ACTIVE;
	default:
		return false;
	}
}

static u16 rxe_ib_port_info(struct rxe_dev *rxe, struct ib_smp *smp, bool set,
			    struct rxe_ib_events *ev)
{
	struct ib_port_info *pi = (struct ib_port_info *)smp->data;
	struct rxe_port *port = &rxe->port;
	struct rxe_ib_port *ib = &port->ib;
	bool link_up = rxe_ib_link_up(rxe);
	u32 port_num = be32_to_cpu(smp->attr_mod);
	unsigned long flags;
	u16 status = 0;

	if (port_num > 1)
		return IB_MGMT_MAD_STATUS_INVALID_ATTRIB_VALUE;

	spin_lock_irqsave(&port->port_lock, flags);
	if (set && !rxe_ib_port_info_valid(rxe, pi)) {
		status = IB_MGMT_MAD_STATUS_INVALID_ATTRIB_VALUE;
	} else if (set) {
		u16 lid = be16_to_cpu(pi->lid);
		u8 lmc = pi->mkeyprot_resv_lmc & 0x7;
		u16 sm_lid = be16_to_cpu(pi->sm_lid);
		u8 sm_sl = pi->neighbormtu_mastersmsl & 0xf;
		u8 state = pi->linkspeed_portstate & 0xf;
		u8 width = pi->link_width_enabled;
		u8 speed = pi->linkspeedactive_enabled & 0xf;
		u8 vls = pi->operationalvl_pei_peo_fpi_fpo >> 4;

		ib->mkey = be64_to_cpu(pi->mkey);
		ib->mkey_lease = be16_to_cpu(pi->mkey_lease_period);
		ib->mkey_prot = pi->mkeyprot_resv_lmc >> 6;
		if (pi->gid_prefix != port->subnet_prefix) {
			WRITE_ONCE(port->subnet_prefix, pi->gid_prefix);
			ev->gid = true;
		}
		if (lid != port->attr.lid || lmc != port->attr.lmc) {
			WRITE_ONCE(port->attr.lid, lid);
			WRITE_ONCE(port->attr.lmc, lmc);
			ev->lid = true;
		}
		if (sm_lid != port->attr.sm_lid || sm_sl != port->attr.sm_sl) {
			port->attr.sm_lid = sm_lid;
			port->attr.sm_sl = sm_sl;
			ev->sm = true;
		}
		if (width)
			ib->link_width_enabled = width == 0xff ?
				RXE_IB_WIDTH_SUPPORTED : width;
		if (speed)
			ib->link_speed_enabled = speed == 0xf ?
				RXE_IB_SPEED_SUPPORTED : speed;
		ib->neighbor_mtu = pi->neighbormtu_mastersmsl >> 4;
		rxe_ib_update_mtu(rxe);
		if (vls)
			ib->op_vls = vls;
		ib->vl_high_limit = pi->vl_high_limit;
		ib->hoq_life = pi->vlstallcnt_hoqlife & 0x1f;
		port->attr.subnet_timeout = pi->clientrereg_resv_subnetto & 0x1f;
		if ((pi->clientrereg_resv_subnetto & 0x80) &&
		    (port->attr.port_cap_flags & IB_PORT_CLIENT_REG_SUP))
			ev->rereg = true;

		switch (state) {
		case IB_PORT_DOWN:
			/* Down, then the link trains again up to INIT. */
			ev->err = port->attr.state == IB_PORT_ACTIVE;
			WRITE_ONCE(port->attr.state,
				   link_up ? IB_PORT_INIT : IB_PORT_DOWN);
			break;
		case IB_PORT_ARMED:
			WRITE_ONCE(port->attr.state, IB_PORT_ARMED);
			break;
		case IB_PORT_ACTIVE:
			ev->active = port->attr.state != IB_PORT_ACTIVE;
			WRITE_ONCE(port->attr.state, IB_PORT_ACTIVE);
			break;
		default:
			break;
		}
	}
	rxe_ib_fill_port_info(rxe, link_up, pi);
	spin_unlock_irqrestore(&port->port_lock, flags);
	return status;
}

static u16 rxe_ib_pkey_table(struct rxe_dev *rxe, struct ib_smp *smp, bool set,
			     struct rxe_ib_events *ev)
{
	struct rxe_port *port = &rxe->port;
	u32 block = be32_to_cpu(smp->attr_mod) & 0xffff;
	__be16 *table = (__be16 *)smp->data;
	unsigned long flags;
	u16 *pkeys;
	int i;

	if (block >= RXE_IB_PKEY_TBL_LEN / 32)
		return IB_MGMT_MAD_STATUS_INVALID_ATTRIB_VALUE;
	pkeys = &port->ib.pkeys[block * 32];

	spin_lock_irqsave(&port->port_lock, flags);
	for (i = 0; i < 32; i++) {
		if (set) {
			u16 pkey = be16_to_cpu(table[i]);

			if (pkeys[i] != pkey) {
				WRITE_ONCE(pkeys[i], pkey);
				ev->pkey = true;
			}
		}
		table[i] = cpu_to_be16(pkeys[i]);
	}
	spin_unlock_irqrestore(&port->port_lock, flags);
	return 0;
}

/* One VL: every SL maps to VL0, whatever the SM writes; what it wrote reads back. */
static u16 rxe_ib_sl_to_vl(struct rxe_dev *rxe, struct ib_smp *smp, bool set)
{
	struct rxe_ib_port *ib = &rxe->port.ib;

	if (set)
		memcpy(ib->sl_to_vl, smp->data, sizeof(ib->sl_to_vl));
	memset(smp->data, 0, sizeof(smp->data));
	memcpy(smp->data, ib->sl_to_vl, sizeof(ib->sl_to_vl));
	return 0;
}

static u16 rxe_ib_vl_arb(struct rxe_dev *rxe, struct ib_smp *smp, bool set)
{
	struct rxe_ib_port *ib = &rxe->port.ib;
	u32 block = be32_to_cpu(smp->attr_mod) >> 16;

	if (block < 1 || block > ARRAY_SIZE(ib->vl_arb))
		return IB_MGMT_MAD_STATUS_INVALID_ATTRIB_VALUE;
	if (set)
		memcpy(ib->vl_arb[block - 1], smp->data, sizeof(ib->vl_arb[0]));
	memcpy(smp->data, ib->vl_arb[block - 1], sizeof(ib->vl_arb[0]));
	return 0;
}

static int rxe_ib_process_mad(struct ib_device *ibdev, int mad_flags,
			      u32 port_num, const struct ib_wc *in_wc,
			      const struct ib_grh *in_grh,
			      const struct ib_mad *in, struct ib_mad *out,
			      size_t *out_mad_size, u16 *out_mad_pkey_index)
{
	struct rxe_dev *rxe = to_rdev(ibdev);
	const struct ib_mad_hdr *hdr = &in->mad_hdr;
	struct ib_smp *smp = (struct ib_smp *)out;
	struct rxe_ib_events ev = {};
	bool set = hdr->method == IB_MGMT_METHOD_SET;
	u16 status;

	if (hdr->mgmt_class != IB_MGMT_CLASS_SUBN_LID_ROUTED &&
	    hdr->mgmt_class != IB_MGMT_CLASS_SUBN_DIRECTED_ROUTE)
		return IB_MAD_RESULT_SUCCESS;
	/* Responses, traps and reports go on to the agents (the SM). */
	if (hdr->method != IB_MGMT_METHOD_GET && !set)
		return IB_MAD_RESULT_SUCCESS;
	if (hdr->attr_id == IB_SMP_ATTR_SM_INFO &&
	    (rxe->port.attr.port_cap_flags & IB_PORT_SM))
		return IB_MAD_RESULT_SUCCESS;

	memcpy(out, in, sizeof(*out));
	if (!set)
		memset(smp->data, 0, sizeof(smp->data));

	if (hdr->base_version != IB_MGMT_BASE_VERSION ||
	    hdr->class_version != 1) {
		status = IB_MGMT_MAD_STATUS_BAD_VERSION;
	} else {
		switch (hdr->attr_id) {
		case IB_SMP_ATTR_NODE_DESC:
			status = set ? IB_MGMT_MAD_STATUS_UNSUPPORTED_METHOD_ATTRIB : 0;
			if (!set)
				memcpy(smp->data, ibdev->node_desc,
				       IB_DEVICE_NODE_DESC_MAX);
			break;
		case IB_SMP_ATTR_NODE_INFO:
			status = set ? IB_MGMT_MAD_STATUS_UNSUPPORTED_METHOD_ATTRIB :
				       rxe_ib_node_info(rxe, smp);
			break;
		case IB_SMP_ATTR_GUID_INFO:
			status = set ? IB_MGMT_MAD_STATUS_UNSUPPORTED_METHOD_ATTRIB :
				       rxe_ib_guid_info(rxe, smp);
			break;
		case IB_SMP_ATTR_PORT_INFO:
			status = rxe_ib_port_info(rxe, smp, set, &ev);
			break;
		case IB_SMP_ATTR_PKEY_TABLE:
			status = rxe_ib_pkey_table(rxe, smp, set, &ev);
			break;
		case IB_SMP_ATTR_SL_TO_VL_TABLE:
			status = rxe_ib_sl_to_vl(rxe, smp, set);
			break;
		case IB_SMP_ATTR_VL_ARB_TABLE:
			status = rxe_ib_vl_arb(rxe, smp, set);
			break;
		default:
			status = IB_MGMT_MAD_STATUS_UNSUPPORTED_METHOD_ATTRIB;
			break;
		}
	}

	smp->method = IB_MGMT_METHOD_GET_RESP;
	smp->status = cpu_to_be16(status);
	if (smp->mgmt_class == IB_MGMT_CLASS_SUBN_DIRECTED_ROUTE)
		smp->status |= IB_SMP_DIRECTION;

	rxe_ib_raise(rxe, &ev);
	return IB_MAD_RESULT_SUCCESS | IB_MAD_RESULT_REPLY;
}

static const struct ib_device_ops rxe_ib_dev_ops = {
	.get_link_layer = rxe_ib_get_link_layer,
	.get_port_immutable = rxe_ib_port_immutable,
	.process_mad = rxe_ib_process_mad,
	.query_gid = rxe_ib_query_gid,
	.query_pkey = rxe_ib_query_pkey,
	.query_port = rxe_ib_query_port,
};

/* Called before rxe's own ops are set: these win where both define one. */
void rxe_ib_set_ops(struct ib_device *dev)
{
	ib_set_device_ops(dev, &rxe_ib_dev_ops);
}

/* Address vectors: LRH fields, and a GRH only where the attributes ask */

int rxe_ib_chk_ah_attr(struct rxe_dev *rxe, struct rdma_ah_attr *attr)
{
	if (attr->type != RDMA_AH_ATTR_TYPE_IB)
		return -EINVAL;
	if ((rdma_ah_get_ah_flags(attr) & IB_AH_GRH) &&
	    rdma_ah_read_grh(attr)->sgid_index != 0)
		return -EINVAL;
	return 0;
}

void rxe_ib_init_av(struct rdma_ah_attr *attr, struct rxe_av *av)
{
	const struct ib_global_route *grh = rdma_ah_read_grh(attr);
	bool has_grh = rdma_ah_get_ah_flags(attr) & IB_AH_GRH;
	struct rxe_ib_av *ib;

	memset(av, 0, sizeof(*av));
	av->port_num = rdma_ah_get_port_num(attr);
	if (has_grh) {
		memcpy(av->grh.dgid.raw, grh->dgid.raw, sizeof(grh->dgid.raw));
		av->grh.flow_label = grh->flow_label;
		av->grh.sgid_index = grh->sgid_index;
		av->grh.hop_limit = grh->hop_limit;
		av->grh.traffic_class = grh->traffic_class;
	}
	ib = rxe_ib_av(av);
	ib->dlid = rdma_ah_get_dlid(attr);
	ib->sl = rdma_ah_get_sl(attr);
	ib->src_path_bits = rdma_ah_get_path_bits(attr);
	ib->has_grh = has_grh;
}

void rxe_ib_av_to_attr(struct rxe_av *av, struct rdma_ah_attr *attr)
{
	struct rxe_ib_av *ib = rxe_ib_av(av);

	attr->type = RDMA_AH_ATTR_TYPE_IB;
	rdma_ah_set_port_num(attr, av->port_num);
	rdma_ah_set_dlid(attr, ib->dlid);
	rdma_ah_set_sl(attr, ib->sl);
	rdma_ah_set_path_bits(attr, ib->src_path_bits);
	if (ib->has_grh)
		rdma_ah_set_grh(attr, (union ib_gid *)av->grh.dgid.raw,
				av->grh.flow_label, av->grh.sgid_index,
				av->grh.hop_limit, av->grh.traffic_class);
}

/* The wire */

struct sk_buff *rxe_ib_init_packet(struct rxe_dev *rxe, struct rxe_av *av,
				   int paylen, struct rxe_pkt_info *pkt)
{
	bool has_grh = rxe_ib_av(av)->has_grh;
	unsigned int hdr_len = RXE_IB_LRH_BYTES +
			       (has_grh ? RXE_IB_GRH_BYTES : 0);
	struct net_device *ndev;
	struct sk_buff *skb;

	ndev = rxe_ib_device_get_netdev(&rxe->ib_dev);
	if (!ndev)
		return NULL;

	skb = alloc_skb(paylen + hdr_len + LL_RESERVED_SPACE(ndev), GFP_ATOMIC);
	if (unlikely(!skb)) {
		dev_put(ndev);
		return NULL;
	}
	skb->tstamp = ktime_get();
	skb_reserve(skb, hdr_len + LL_RESERVED_SPACE(ndev));
	/* As for RoCE, the netdev outlives the device's packets. */
	skb->dev = ndev;
	dev_put(ndev);
	skb->protocol = htons(RXE_IB_ETHERTYPE);

	pkt->rxe = rxe;
	pkt->port_num = 1;
	pkt->hdr = skb_put(skb, paylen);
	pkt->mask |= RXE_LRH_MASK | (has_grh ? RXE_GRH_MASK : 0);
	return skb;
}

int rxe_ib_prepare(struct rxe_av *av, struct rxe_pkt_info *pkt,
		   struct sk_buff *skb)
{
	struct rxe_dev *rxe = pkt->rxe;
	struct rxe_port *port = &rxe->port;
	struct rxe_ib_av *ib = rxe_ib_av(av);
	u16 lid = READ_ONCE(port->attr.lid);
	u16 mask = rxe_ib_lmc_mask(READ_ONCE(port->attr.lmc));
	bool smi = pkt->qp && qp_type(pkt->qp) == IB_QPT_SMI;
	u16 slid = lid ? lid | (ib->src_path_bits & mask) : be16_to_cpu(IB_LID_PERMISSIVE);
	unsigned int len = RXE_IB_LRH_BYTES + pkt->paylen;
	u8 *lrh;

	if (ib->has_grh) {
		struct ib_grh *grh = skb_push(skb, sizeof(*grh));

		grh->version_tclass_flow =
			cpu_to_be32((6 << 28) | (av->grh.traffic_class << 20) |
				    (av->grh.flow_label & 0xfffff));
		grh->paylen = cpu_to_be16(pkt->paylen);
		grh->next_hdr = RXE_IB_GRH_NEXT_HDR;
		grh->hop_limit = av->grh.hop_limit;
		grh->sgid.global.subnet_prefix = READ_ONCE(port->subnet_prefix);
		grh->sgid.global.interface_id = port->port_guid;
		memcpy(grh->dgid.raw, av->grh.dgid.raw, sizeof(grh->dgid.raw));
		len += RXE_IB_GRH_BYTES;
	}

	lrh = skb_push(skb, RXE_IB_LRH_BYTES);
	lrh[0] = (smi ? RXE_IB_VL_SMP : 0) << 4;
	lrh[1] = (ib->sl << 4) |
		 (ib->has_grh ? RXE_IB_LNH_GLOBAL : RXE_IB_LNH_LOCAL);
	put_unaligned_be16(ib->dlid, lrh + 2);
	put_unaligned_be16(len / 4, lrh + 4);
	put_unaligned_be16(slid, lrh + 6);
	skb_reset_network_header(skb);

	if (lid && (ib->dlid & ~mask) == lid)
		pkt->mask |= RXE_LOOPBACK_MASK;
	return 0;
}

static bool rxe_ib_dlid_multicast(u16 dlid)
{
	return dlid >= be16_to_cpu(IB_MULTICAST_LID_BASE) &&
	       dlid != be16_to_cpu(IB_LID_PERMISSIVE);
}

/*
 * Receives a packet that starts with its LRH, from the wire or looped back.
 * Takes over the skb and the reference on the device.
 */
static void rxe_ib_deliver(struct rxe_dev *rxe, struct sk_buff *skb)
{
	struct rxe_pkt_info *pkt = SKB_TO_PKT(skb);
	unsigned int hdr_len, pkt_len;
	const u8 *lrh;
	bool global;

	if (unlikely(skb->len < RXE_IB_LRH_BYTES))
		goto drop;
	lrh = skb->data;
	if ((lrh[0] & 0xf) != 0)	/* LVer */
		goto drop;
	switch (lrh[1] & 0x3) {
	case RXE_IB_LNH_LOCAL:
		global = false;
		break;
	case RXE_IB_LNH_GLOBAL:
		global = true;
		break;
	default:
		goto drop;
	}
	hdr_len = RXE_IB_LRH_BYTES + (global ? RXE_IB_GRH_BYTES : 0);
	pkt_len = (get_unaligned_be16(lrh + 4) & 0x7ff) * 4;
	/* Ethernet pads short frames: the LRH says where the packet ends. */
	if (unlikely(pkt_len > skb->len ||
		     pkt_len < hdr_len + RXE_BTH_BYTES + RXE_ICRC_SIZE))
		goto drop;
	if (global && ((struct ib_grh *)(lrh + RXE_IB_LRH_BYTES))->next_hdr !=
		      RXE_IB_GRH_NEXT_HDR)
		goto drop;
	if (pskb_trim(skb, pkt_len))
		goto drop;

	skb_reset_network_header(skb);
	skb_pull(skb, hdr_len);
	memset(pkt, 0, sizeof(*pkt));
	pkt->rxe = rxe;
	pkt->port_num = 1;
	pkt->hdr = skb->data;
	pkt->paylen = pkt_len - hdr_len;
	pkt->mask = RXE_LRH_MASK | (global ? RXE_GRH_MASK : 0);
	skb->protocol = htons(RXE_IB_ETHERTYPE);

	rxe_rcv(skb);
	return;

drop:
	rxe_counter_inc(rxe, RXE_CNT_IB_RCV_DROPS);
	kfree_skb(skb);
	ib_device_put(&rxe->ib_dev);
}

/* Delivers a packet of ours to ourselves; takes over the skb. */
int rxe_ib_loopback(struct rxe_dev *rxe, struct sk_buff *skb)
{
	if (WARN_ON(!ib_device_try_get(&rxe->ib_dev))) {
		kfree_skb(skb);
		return -EIO;
	}
	skb_push(skb, skb->data - skb_network_header(skb));
	rxe_ib_deliver(rxe, skb);
	return 0;
}

/*
 * Sends a prepared packet (data at the BTH, LRH at the network header) to the
 * other end of the cable; multicast is also delivered here, as an HCA loops
 * it back to its own attached queue pairs. Takes over the skb.
 */
int rxe_ib_send(struct rxe_dev *rxe, struct sk_buff *skb)
{
	struct net_device *ndev = skb->dev;
	int err;

	if (rxe_ib_dlid_multicast(rxe_ib_lrh_dlid(rxe_ib_lrh(skb)))) {
		struct sk_buff *local = skb_copy(skb, GFP_ATOMIC);

		if (local)
			rxe_ib_loopback(rxe, local);
	}

	skb_push(skb, skb->data - skb_network_header(skb));
	err = dev_hard_header(skb, ndev, RXE_IB_ETHERTYPE, ndev->broadcast,
			      ndev->dev_addr, skb->len);
	if (err < 0) {
		kfree_skb(skb);
		return -EINVAL;
	}
	err = dev_queue_xmit(skb);
	/* A frame the link drops is lost on the wire: the transport recovers. */
	return err < 0 ? err : 0;
}

/* Receive filter: the DLID decides, as an IB port's link layer does. */
int rxe_ib_chk_lrh(struct rxe_pkt_info *pkt, struct sk_buff *skb)
{
	struct rxe_port *port = &pkt->rxe->port;
	u16 dlid = rxe_ib_lrh_dlid(rxe_ib_lrh(skb));
	u32 qpn = bth_qpn(pkt);
	u16 lid, mask;

	if (dlid == be16_to_cpu(IB_LID_PERMISSIVE))
		return qpn == 0 ? 0 : -EINVAL;
	if (qpn != 0 && READ_ONCE(port->attr.state) < IB_PORT_ARMED)
		return -EINVAL;
	if (rxe_ib_dlid_multicast(dlid))
		return (pkt->mask & RXE_GRH_MASK) && qpn == IB_MULTICAST_QPN ?
			0 : -EINVAL;
	lid = READ_ONCE(port->attr.lid);
	mask = rxe_ib_lmc_mask(READ_ONCE(port->attr.lmc));
	if (!lid || (dlid & ~mask) != lid)
		return -EINVAL;
	return 0;
}

void rxe_ib_recv_grh(struct sk_buff *skb, struct rxe_pkt_info *pkt,
		     union rdma_network_hdr *hdr)
{
	if (pkt->mask & RXE_GRH_MASK)
		memcpy(&hdr->ibgrh, rxe_ib_lrh(skb) + RXE_IB_LRH_BYTES,
		       sizeof(hdr->ibgrh));
	else
		memset(hdr, 0, sizeof(*hdr));
}

void rxe_ib_complete_wc(struct sk_buff *skb, struct rxe_pkt_info *pkt,
			struct ib_wc *wc)
{
	const u8 *lrh = rxe_ib_lrh(skb);
	u16 mask = rxe_ib_lmc_mask(READ_ONCE(pkt->rxe->port.attr.lmc));

	wc->wc_flags &= ~(IB_WC_GRH | IB_WC_WITH_NETWORK_HDR_TYPE);
	if (pkt->mask & RXE_GRH_MASK)
		wc->wc_flags |= IB_WC_GRH;
	wc->slid = rxe_ib_lrh_slid(lrh);
	wc->sl = rxe_ib_lrh_sl(lrh);
	wc->dlid_path_bits = rxe_ib_lrh_dlid(lrh) & mask;
	wc->pkey_index = pkt->pkey_index;
}

void rxe_ib_complete_uwc(struct sk_buff *skb, struct rxe_pkt_info *pkt,
			 struct ib_uverbs_wc *uwc)
{
	const u8 *lrh = rxe_ib_lrh(skb);
	u16 mask = rxe_ib_lmc_mask(READ_ONCE(pkt->rxe->port.attr.lmc));

	uwc->wc_flags &= ~IB_WC_GRH;
	if (pkt->mask & RXE_GRH_MASK)
		uwc->wc_flags |= IB_WC_GRH;
	uwc->slid = rxe_ib_lrh_slid(lrh);
	uwc->sl = rxe_ib_lrh_sl(lrh);
	uwc->dlid_path_bits = rxe_ib_lrh_dlid(lrh) & mask;
	uwc->pkey_index = pkt->pkey_index;
}

static int rxe_ib_recv_frame(struct sk_buff *skb, struct net_device *ndev,
			     struct packet_type *pt,
			     struct net_device *orig_dev)
{
	struct rxe_dev *rxe = rxe_get_dev_from_net(ndev);

	if (!rxe)
		goto drop;
	if (!rxe_is_ib(rxe))
		goto put;

	skb = skb_share_check(skb, GFP_ATOMIC);
	if (!skb) {
		rxe_counter_inc(rxe, RXE_CNT_IB_RCV_DROPS);
		ib_device_put(&rxe->ib_dev);
		return NET_RX_DROP;
	}
	if (skb_linearize(skb)) {
		rxe_counter_inc(rxe, RXE_CNT_IB_RCV_DROPS);
		goto put;
	}
	rxe_ib_deliver(rxe, skb);
	return NET_RX_SUCCESS;

put:
	ib_device_put(&rxe->ib_dev);
drop:
	kfree_skb(skb);
	return NET_RX_DROP;
}

static struct packet_type rxe_ib_packet_type = {
	.type = cpu_to_be16(RXE_IB_ETHERTYPE),
	.func = rxe_ib_recv_frame,
};

int rxe_ib_net_init(void)
{
	dev_add_pack(&rxe_ib_packet_type);
	return 0;
}

void rxe_ib_net_exit(void)
{
	dev_remove_pack(&rxe_ib_packet_type);
}
