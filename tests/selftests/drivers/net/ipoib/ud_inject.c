// SPDX-License-Identifier: GPL-2.0
/*
 * Sends malformed IPoIB datagrams to an interface's UD queue pair from user space, so that
 * the tests can check that the driver drops and counts them.
 *
 * Usage: ud_inject DEVICE SGID_INDEX IB_ADDRESS QKEY KIND COUNT
 *   DEVICE      RDMA device to send from (port 1), e.g. rxe1
 *   SGID_INDEX  index of the RoCE v2 GID to send from
 *   IB_ADDRESS  the target's 20-byte address as /sys/class/net/ibN/address prints it
 *   QKEY        Q_Key to send with (IPoIB's is 0x0b1b; another one must be ignored)
 *   KIND        empty: no payload; short: 2 bytes, less than the IPoIB header;
 *               unknown: header with ethertype 0x88b6 (local experimental 2: the test
 *               kernel's rxe_ib takes 0x88b5) and 64 bytes;
 *               garbage: IPv4 ethertype and 64 bytes of noise
 *   COUNT       how many datagrams
 * Prints "sent COUNT KIND" and exits 0 once every send completed successfully.
 */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PORT 1
#define BUF_LEN 128

static int fail(const char *what)
{
	fprintf(stderr, "ud_inject: %s: %s\n", what, strerror(errno ? errno : EINVAL));
	return 1;
}

/* Parses "xx:xx:...": 20 bytes; the QPN is in bytes 1..3, the GID in bytes 4..19. */
static int parse_address(const char *s, uint8_t out[20])
{
	for (int i = 0; i < 20; i++) {
		unsigned int b;
		int n;

		if (sscanf(s, "%2x%n", &b, &n) != 1 || n != 2)
			return -1;
		out[i] = b;
		s += n;
		if (i < 19 && *s++ != ':')
			return -1;
	}
	return *s ? -1 : 0;
}

/* The payload of one datagram of KIND into buf; returns its length or -1. */
static int fill(const char *kind, uint8_t *buf)
{
	memset(buf, 0, BUF_LEN);
	if (!strcmp(kind, "empty"))
		return 0;
	if (!strcmp(kind, "short")) {
		buf[0] = 0x08;
		buf[1] = 0x00;
		return 2;
	}
	if (!strcmp(kind, "unknown")) {
		buf[0] = 0x88;
		buf[1] = 0xb6;
		memset(buf + 4, 0xa5, 64);
		return 68;
	}
	if (!strcmp(kind, "garbage")) {
		buf[0] = 0x08;
		buf[1] = 0x00;
		for (int i = 4; i < 68; i++)
			buf[i] = (uint8_t)(i * 37 + 11);
		return 68;
	}
	return -1;
}

int main(int argc, char **argv)
{
	struct ibv_device **list;
	struct ibv_context *ctx = NULL;
	uint8_t addr[20], *buf;
	int sgid_index, count, len, done = 0;
	uint32_t qkey, qpn;

	if (argc != 7) {
		fprintf(stderr, "usage: %s DEVICE SGID_INDEX IB_ADDRESS QKEY KIND COUNT\n",
			argv[0]);
		return 2;
	}
	sgid_index = atoi(argv[2]);
	qkey = strtoul(argv[4], NULL, 0);
	count = atoi(argv[6]);
	if (parse_address(argv[3], addr) || count <= 0) {
		fprintf(stderr, "ud_inject: bad address or count\n");
		return 2;
	}
	qpn = (uint32_t)addr[1] << 16 | addr[2] << 8 | addr[3];

	list = ibv_get_device_list(NULL);
	for (int i = 0; list && list[i]; i++)
		if (!strcmp(ibv_get_device_name(list[i]), argv[1]))
			ctx = ibv_open_device(list[i]);
	if (!ctx)
		return fail("no such device");

	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = pd ? ibv_create_cq(ctx, 16, NULL, NULL, 0) : NULL;

	if (!cq)
		return fail("PD or CQ");
	struct ibv_qp_init_attr init = {
		.send_cq = cq,
		.recv_cq = cq,
		.cap = { .max_send_wr = 8, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_UD,
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &init);

	if (!qp)
		return fail("UD QP");
	struct ibv_qp_attr attr = { .qp_state = IBV_QPS_INIT, .port_num = PORT, .qkey = qkey };

	if (ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		return fail("QP to INIT");
	attr = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTR };
	if (ibv_modify_qp(qp, &attr, IBV_QP_STATE))
		return fail("QP to RTR");
	attr = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTS, .sq_psn = 0 };
	if (ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_SQ_PSN))
		return fail("QP to RTS");

	struct ibv_ah_attr ah_attr = {
		.is_global = 1,
		.port_num = PORT,
		.grh = { .sgid_index = sgid_index, .hop_limit = 64 },
	};
	memcpy(ah_attr.grh.dgid.raw, addr + 4, 16);
	struct ibv_ah *ah = ibv_create_ah(pd, &ah_attr);

	if (!ah)
		return fail("address handle");

	buf = calloc(1, BUF_LEN);
	struct ibv_mr *mr = buf ? ibv_reg_mr(pd, buf, BUF_LEN, IBV_ACCESS_LOCAL_WRITE) : NULL;

	if (!mr)
		return fail("memory region");
	len = fill(argv[5], buf);
	if (len < 0) {
		fprintf(stderr, "ud_inject: unknown kind %s\n", argv[5]);
		return 2;
	}

	/* One datagram at a time: each completes before the next is posted. */
	for (int i = 0; i < count; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = len, .lkey = mr->lkey };
		struct ibv_send_wr wr = {
			.wr_id = i,
			.sg_list = &sge,
			.num_sge = len ? 1 : 0,
			.opcode = IBV_WR_SEND,
			.send_flags = IBV_SEND_SIGNALED,
			.wr.ud = { .ah = ah, .remote_qpn = qpn, .remote_qkey = qkey },
		}, *bad;
		struct ibv_wc wc;
		int n;

		if (ibv_post_send(qp, &wr, &bad))
			return fail("post send");
		while ((n = ibv_poll_cq(cq, 1, &wc)) == 0)
			;
		if (n < 0 || wc.status != IBV_WC_SUCCESS) {
			fprintf(stderr, "ud_inject: send %d: %s\n", i,
				n < 0 ? "poll failed" : ibv_wc_status_str(wc.status));
			return 1;
		}
		done++;
	}
	printf("sent %d %s\n", done, argv[5]);

	ibv_dereg_mr(mr);
	ibv_destroy_ah(ah);
	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	free(buf);
	return 0;
}
