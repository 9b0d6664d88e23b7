// SPDX-License-Identifier: GPL-2.0

#include <rdma/ib_cm.h>
#include <rdma/ib_verbs.h>

u32 rust_helper_rdma_start_port(const struct ib_device *device)
{
	return rdma_start_port(device);
}

u32 rust_helper_rdma_end_port(const struct ib_device *device)
{
	return rdma_end_port(device);
}

bool rust_helper_rdma_protocol_ib(const struct ib_device *device, u32 port_num)
{
	return rdma_protocol_ib(device, port_num);
}

bool rust_helper_rdma_protocol_roce(const struct ib_device *device, u32 port_num)
{
	return rdma_protocol_roce(device, port_num);
}

bool rust_helper_ib_device_try_get(struct ib_device *dev)
{
	return ib_device_try_get(dev);
}

int rust_helper_ib_poll_cq(struct ib_cq *cq, int num_entries, struct ib_wc *wc)
{
	return ib_poll_cq(cq, num_entries, wc);
}

int rust_helper_ib_req_notify_cq(struct ib_cq *cq, enum ib_cq_notify_flags flags)
{
	return ib_req_notify_cq(cq, flags);
}

int rust_helper_ib_post_send(struct ib_qp *qp, const struct ib_send_wr *send_wr,
			     const struct ib_send_wr **bad_send_wr)
{
	return ib_post_send(qp, send_wr, bad_send_wr);
}

int rust_helper_ib_post_recv(struct ib_qp *qp, const struct ib_recv_wr *recv_wr,
			     const struct ib_recv_wr **bad_recv_wr)
{
	return ib_post_recv(qp, recv_wr, bad_recv_wr);
}

u64 rust_helper_ib_dma_map_single(struct ib_device *dev, void *cpu_addr, size_t size,
				  enum dma_data_direction direction)
{
	return ib_dma_map_single(dev, cpu_addr, size, direction);
}

void rust_helper_ib_dma_unmap_single(struct ib_device *dev, u64 addr, size_t size,
				     enum dma_data_direction direction)
{
	ib_dma_unmap_single(dev, addr, size, direction);
}

int rust_helper_ib_dma_mapping_error(struct ib_device *dev, u64 dma_addr)
{
	return ib_dma_mapping_error(dev, dma_addr);
}

void rust_helper_ib_dma_sync_single_for_cpu(struct ib_device *dev, u64 addr, size_t size,
					    enum dma_data_direction dir)
{
	ib_dma_sync_single_for_cpu(dev, addr, size, dir);
}

void rust_helper_ib_dma_sync_single_for_device(struct ib_device *dev, u64 addr, size_t size,
					       enum dma_data_direction dir)
{
	ib_dma_sync_single_for_device(dev, addr, size, dir);
}

void rust_helper_ib_init_event_handler(struct ib_event_handler *handler, struct ib_device *device,
				       void (*cb)(struct ib_event_handler *, struct ib_event *))
{
	INIT_IB_EVENT_HANDLER(handler, device, cb);
}

int rust_helper_ib_post_srq_recv(struct ib_srq *srq, const struct ib_recv_wr *recv_wr,
				 const struct ib_recv_wr **bad_recv_wr)
{
	return ib_post_srq_recv(srq, recv_wr, bad_recv_wr);
}

u64 rust_helper_ib_dma_map_page(struct ib_device *dev, struct page *page,
				unsigned long offset, size_t size,
				enum dma_data_direction direction)
{
	return ib_dma_map_page(dev, page, offset, size, direction);
}

void rust_helper_ib_dma_unmap_page(struct ib_device *dev, u64 addr, size_t size,
				   enum dma_data_direction direction)
{
	ib_dma_unmap_page(dev, addr, size, direction);
}

/*
 * The RNR retry counts of CM events are read here, not through bindgen's bit-field
 * accessors: in struct ib_cm_req_event_param the field would straddle a 32-bit unit,
 * so the compiler starts it in the next unit, while bindgen's accessor reads the two
 * padding bits before that unit and the field's lowest bit.
 */
u8 rust_helper_ib_cm_req_rnr_retry_count(const struct ib_cm_req_event_param *param)
{
	return param->rnr_retry_count;
}

u8 rust_helper_ib_cm_rep_rnr_retry_count(const struct ib_cm_rep_event_param *param)
{
	return param->rnr_retry_count;
}
