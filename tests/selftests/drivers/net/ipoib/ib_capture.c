// SPDX-License-Identifier: GPL-2.0
/*
 * ib_capture: watches the InfiniBand frames (ethertype 0x88B5, the framing of
 * rxe_ib) an Ethernet interface sends and receives for a while, and prints
 * what IPoIB's wire contract fixes in them, one line per distinct finding with
 * its count:
 *   ud slid=S dlid=D pkey=0xPPPP qkey=0xQQQQQQQQ grh=G    datagrams (not MADs)
 *   rc slid=S dlid=D pkey=0xPPPP                           RC packets
 *   REQ slid=S retry=R rnr=N qpn=0xQQQQQQ mtu=M srq=Q     CM requests
 *   REP slid=S rnr=N qpn=0xQQQQQQ mtu=M                   CM replies
 * (qpn and mtu: IPoIB's private data, RFC 4755.) Usage: ib_capture IFNAME SECONDS
 * Exits non-zero if the interface cannot be watched.
 */
#include <arpa/inet.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define ETHERTYPE_IB 0x88B5
#define LRH_LEN 8
#define GRH_LEN 40
#define BTH_LEN 12
#define DETH_LEN 8
#define MAD_CLASS_CM 0x07
#define CM_REQ 0x0010
#define CM_REP 0x0013
#define MAX_FINDINGS 64

static struct {
	char what[128];
	unsigned long count;
} findings[MAX_FINDINGS];
static int nfindings;

static void note(const char *what)
{
	int i;

	for (i = 0; i < nfindings; i++) {
		if (!strcmp(findings[i].what, what)) {
			findings[i].count++;
			return;
		}
	}
	if (nfindings == MAX_FINDINGS)
		return;
	snprintf(findings[nfindings].what, sizeof(findings[0].what), "%s", what);
	findings[nfindings++].count = 1;
}

static uint32_t be(const uint8_t *p, int n)
{
	uint32_t v = 0;

	while (n--)
		v = v << 8 | *p++;
	return v;
}

/* A CM MAD (after BTH and DETH): the REQ's and REP's fields IPoIB sets. */
static void cm_mad(const uint8_t *mad, size_t len, unsigned int slid)
{
	char line[128];
	unsigned int attr;

	if (len < 256 || mad[1] != MAD_CLASS_CM)
		return;
	attr = be(mad + 16, 2);
	if (attr == CM_REQ) {
		snprintf(line, sizeof(line),
			 "REQ slid=%u retry=%u rnr=%u qpn=0x%06x mtu=%u srq=%u",
			 slid, mad[71] & 7, mad[74] & 7,
			 be(mad + 164, 4) & 0xffffff, be(mad + 168, 4),
			 (mad[75] >> 3) & 1);
		note(line);
	} else if (attr == CM_REP) {
		snprintf(line, sizeof(line), "REP slid=%u rnr=%u qpn=0x%06x mtu=%u",
			 slid, mad[51] >> 5, be(mad + 60, 4) & 0xffffff,
			 be(mad + 64, 4));
		note(line);
	}
}

static void frame(const uint8_t *p, size_t len)
{
	unsigned int lnh, slid, dlid, opcode, pkey, dqp;
	size_t off = LRH_LEN;
	char line[128];

	if (len < LRH_LEN + BTH_LEN)
		return;
	lnh = p[1] & 3;
	dlid = be(p + 2, 2);
	slid = be(p + 6, 2);
	if (lnh == 3)
		off += GRH_LEN;
	else if (lnh != 2)
		return;
	if (len < off + BTH_LEN)
		return;
	opcode = p[off];
	pkey = be(p + off + 2, 2);
	dqp = be(p + off + 5, 3);
	off += BTH_LEN;
	if (opcode == 0x64 || opcode == 0x65) {		/* UD SEND only [imm] */
		if (len < off + DETH_LEN)
			return;
		if (dqp == 0 || dqp == 1) {
			cm_mad(p + off + DETH_LEN + (opcode == 0x65 ? 4 : 0),
			       len - off - DETH_LEN, slid);
			return;
		}
		snprintf(line, sizeof(line),
			 "ud slid=%u dlid=%u pkey=0x%04x qkey=0x%08x grh=%u", slid,
			 dlid, pkey, be(p + off, 4), lnh == 3);
		note(line);
	} else if (opcode <= 0x05) {			/* RC SEND */
		snprintf(line, sizeof(line), "rc slid=%u dlid=%u pkey=0x%04x",
			 slid, dlid, pkey);
		note(line);
	}
}

int main(int argc, char **argv)
{
	struct sockaddr_ll at = { .sll_family = AF_PACKET };
	uint8_t buf[9216];
	struct timespec now;
	time_t until;
	int fd, i;

	if (argc != 3) {
		fprintf(stderr, "usage: %s IFNAME SECONDS\n", argv[0]);
		return 2;
	}
	/* All protocols: only such sockets see the frames sent too. */
	fd = socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL));
	if (fd < 0) {
		perror("socket");
		return 1;
	}
	at.sll_protocol = htons(ETH_P_ALL);
	at.sll_ifindex = if_nametoindex(argv[1]);
	if (!at.sll_ifindex || bind(fd, (struct sockaddr *)&at, sizeof(at))) {
		perror(argv[1]);
		return 1;
	}
	clock_gettime(CLOCK_MONOTONIC, &now);
	until = now.tv_sec + atoi(argv[2]);
	for (;;) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		ssize_t n;

		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec >= until)
			break;
		if (poll(&pfd, 1, (until - now.tv_sec) * 1000) <= 0)
			continue;
		n = recv(fd, buf, sizeof(buf), 0);
		/* The Ethernet header, then the InfiniBand frame. */
		if (n > ETH_HLEN && be(buf + 12, 2) == ETHERTYPE_IB)
			frame(buf + ETH_HLEN, n - ETH_HLEN);
	}
	for (i = 0; i < nfindings; i++)
		printf("%s count=%lu\n", findings[i].what, findings[i].count);
	return 0;
}
