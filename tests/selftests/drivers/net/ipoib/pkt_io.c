// SPDX-License-Identifier: GPL-2.0
/*
 * pkt_io: packets of one ethertype through a packet socket on one interface, as a
 * protocol of that ethertype (in the kernel or user space) would send and receive them.
 *
 * Usage: pkt_io recv IFNAME ETHERTYPE SECONDS MAX
 *          prints "listening on IFNAME" to stderr once bound, counts the packets of
 *          ETHERTYPE IFNAME receives until MAX arrived or SECONDS passed, prints
 *          "received N"
 *        pkt_io send IFNAME ETHERTYPE HWADDR COUNT
 *          sends COUNT 64-byte packets of ETHERTYPE to HWADDR (colon-separated hex, the
 *          interface's address length) out of IFNAME, prints "sent N" (those the
 *          interface's queue took)
 */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#define MAX_HWADDR 32

/* A sockaddr_ll with room for addresses longer than its 8 bytes (IPoIB's are 20). */
struct long_sockaddr_ll {
	struct sockaddr_ll ll;
	unsigned char more[MAX_HWADDR - 8];
};

static long now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static int fail(const char *what, const char *ifname)
{
	fprintf(stderr, "pkt_io: %s on %s: %s\n", what, ifname, strerror(errno));
	return 1;
}

static int recv_some(int fd, const char *ifname, long seconds, int max)
{
	long deadline = now_ms() + seconds * 1000;
	int received = 0;

	fprintf(stderr, "listening on %s\n", ifname);
	while (received < max) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		long left = deadline - now_ms();
		char buf[4096];

		if (left <= 0 || poll(&p, 1, left) <= 0)
			break;
		if (recv(fd, buf, sizeof(buf), 0) >= 0)
			received++;
	}
	printf("received %d\n", received);
	return 0;
}

static int send_some(int fd, struct long_sockaddr_ll *to, const char *hwaddr, int count)
{
	unsigned char *addr = to->ll.sll_addr;
	const char *p = hwaddr;
	char payload[64] = "ipoib-rs pkt_io";
	int len = 0, sent = 0;

	while (*p && len < MAX_HWADDR) {
		char *end;

		addr[len++] = strtoul(p, &end, 16);
		if (end == p || (*end && *end != ':')) {
			fprintf(stderr, "pkt_io: %s is not a hardware address\n", hwaddr);
			return 2;
		}
		p = *end ? end + 1 : end;
	}
	to->ll.sll_halen = len;
	for (int i = 0; i < count; i++)
		if (sendto(fd, payload, sizeof(payload), 0, (struct sockaddr *)to,
			   sizeof(*to)) == sizeof(payload))
			sent++;
	printf("sent %d\n", sent);
	return sent == count ? 0 : 1;
}

int main(int argc, char **argv)
{
	struct long_sockaddr_ll at = { .ll = { .sll_family = AF_PACKET } };
	int fd, recv_mode;

	recv_mode = argc == 6 && !strcmp(argv[1], "recv");
	if (!recv_mode && !(argc == 6 && !strcmp(argv[1], "send"))) {
		fprintf(stderr, "usage: %s recv IFNAME ETHERTYPE SECONDS MAX\n"
				"       %s send IFNAME ETHERTYPE HWADDR COUNT\n", argv[0], argv[0]);
		return 2;
	}
	at.ll.sll_protocol = htons(strtoul(argv[3], NULL, 0));
	at.ll.sll_ifindex = if_nametoindex(argv[2]);
	if (!at.ll.sll_ifindex)
		return fail("no such interface", argv[2]);
	fd = socket(AF_PACKET, SOCK_DGRAM, recv_mode ? at.ll.sll_protocol : 0);
	if (fd < 0)
		return fail("packet socket", argv[2]);
	if (!recv_mode)
		return send_some(fd, &at, argv[4], atoi(argv[5]));
	if (bind(fd, (struct sockaddr *)&at.ll, sizeof(at.ll)))
		return fail("bind", argv[2]);
	return recv_some(fd, argv[2], atol(argv[4]), atoi(argv[5]));
}
