// SPDX-License-Identifier: GPL-2.0

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
