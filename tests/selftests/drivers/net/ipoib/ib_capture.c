// SPDX-License-Identifier: GPL-2.0
/*
 * ib_capture: watches the InfiniBand frames (ethertype 0x88B5, the framing of
 * rxe_ib) and the RoCE v2 packets (UDP port 4791, over IPv4 or IPv6) an Ethernet
 * interface sends and receives for a while, and prints what IPoIB's wire
 * contract fixes in them, one line per distinct finding with its count:
 *   ud slid=S dlid=D pkey=0xPPPP qkey=0xQQQQQQQQ grh=G    datagrams (not MADs)
 *   rc slid=S dlid=D pkey=0xPPPP                           RC packets
 *   REQ slid=S retry=R rnr=N qpn=0xQQQQQQ mtu=M srq=Q     CM requests
 *   REP slid=S rnr=N qpn=0xQQQQQQ mtu=M                   CM replies
 *   rnr-nak slid=S timer=T                                 "receiver not ready"
 *                                                          answers and the wait
 *                                                          they ask (its code)
 * (qpn and mtu: IPoIB's private data, RFC 4755; RoCE has no LIDs: S and D are
 * 0 there.) Usage: ib_capture IFNAME SECONDS
 * Stops early, still printing, on SIGTERM or SIGINT. Exits non-zero if the
 * interface cannot be watched.
 */
#include <arpa/inet.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define ETHERTYPE_IB 0x88B5
#define ROCE_V2_PORT 4791
#define IPV6_LEN 40
#define UDP_LEN 8
#define AETH_LEN 4
#define OP_RC_ACK 0x11
#define AETH_RNR_NAK 1
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
static volatile sig_atomic_t stopped;

static void stop(int sig)
{
	stopped = sig;
}

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

/* The transport headers from the BTH at p + off on, of a packet from slid to dlid. */
static void transport(const uint8_t *p, size_t len, size_t off, unsigned int slid,
		      unsigned int dlid, int grh)
{
	unsigned int opcode, pkey, dqp;
	char line[128];

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
			 dlid, pkey, be(p + off, 4), grh);
		note(line);
	} else if (opcode <= 0x05) {			/* RC SEND */
		snprintf(line, sizeof(line), "rc slid=%u dlid=%u pkey=0x%04x",
			 slid, dlid, pkey);
		note(line);
	} else if (opcode == OP_RC_ACK && len >= off + AETH_LEN &&
		   (p[off] >> 5 & 3) == AETH_RNR_NAK) {
		snprintf(line, sizeof(line), "rnr-nak slid=%u timer=%u", slid,
			 p[off] & 0x1f);
		note(line);
	}
}

/* An InfiniBand frame: LRH, perhaps a GRH, then the transport. */
static void ib_frame(const uint8_t *p, size_t len)
{
	unsigned int lnh;

	if (len < LRH_LEN)
		return;
	lnh = p[1] & 3;
	if (lnh != 2 && lnh != 3)
		return;
	transport(p, len, LRH_LEN + (lnh == 3 ? GRH_LEN : 0), be(p + 6, 2),
		  be(p + 2, 2), lnh == 3);
}

/* An IP packet of ethertype type: RoCE v2 if it is UDP to port 4791. */
static void roce_v2(const uint8_t *p, size_t len, unsigned int type)
{
	size_t off;

	if (type == ETH_P_IPV6 && len >= IPV6_LEN && p[6] == IPPROTO_UDP)
		off = IPV6_LEN;
	else if (type == ETH_P_IP && len >= 20 && p[9] == IPPROTO_UDP)
		off = (p[0] & 0xf) * 4;
	else
		return;
	if (len < off + UDP_LEN || be(p + off + 2, 2) != ROCE_V2_PORT)
		return;
	transport(p, len, off + UDP_LEN, 0, 0, 1);
}

int main(int argc, char **argv)
{
	struct sockaddr_ll at = { .sll_family = AF_PACKET };
	struct sigaction sa = { 0 };
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
	/* Tests start the traffic once this line is out. */
	fprintf(stderr, "capturing on %s\n", argv[1]);
	/* No SA_RESTART: the signal ends the poll below. */
	sa.sa_handler = stop;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	clock_gettime(CLOCK_MONOTONIC, &now);
	until = now.tv_sec + atoi(argv[2]);
	while (!stopped) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		ssize_t n;

		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec >= until)
			break;
		/* A second at most: a signal just before the poll is seen soon. */
		if (poll(&pfd, 1, 1000) <= 0)
			continue;
		n = recv(fd, buf, sizeof(buf), 0);
		/* The Ethernet header, then the InfiniBand frame or IP packet. */
		if (n <= ETH_HLEN)
			continue;
		if (be(buf + 12, 2) == ETHERTYPE_IB)
			ib_frame(buf + ETH_HLEN, n - ETH_HLEN);
		else
			roce_v2(buf + ETH_HLEN, n - ETH_HLEN, be(buf + 12, 2));
	}
	for (i = 0; i < nfindings; i++)
		printf("%s count=%lu\n", findings[i].what, findings[i].count);
	return 0;
}
