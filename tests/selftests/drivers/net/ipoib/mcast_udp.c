// SPDX-License-Identifier: GPL-2.0
/*
 * IPv4 and IPv6 multicast over one interface, for the tests: a receiver that joins a group
 * and counts what arrives, and a sender.
 *
 * Usage: mcast_udp recv IFNAME GROUP PORT SECONDS MAX
 *          joins GROUP on IFNAME, counts datagrams to GROUP:PORT until MAX arrived or
 *          SECONDS passed, prints "received N", leaves the group (closing the socket)
 *        mcast_udp send IFNAME GROUP PORT COUNT INTERVAL_MS
 *          sends COUNT datagrams to GROUP:PORT out of IFNAME, prints "sent N"
 *        mcast_udp join IFNAME GROUP COUNT SECONDS
 *          joins COUNT consecutive IPv4 groups from GROUP on IFNAME (20 a socket, the
 *          default per-socket limit), prints "joined N", holds them SECONDS (or until
 *          killed), and leaves them by exiting
 *        mcast_udp count IFNAME GROUP COUNT PORT SECONDS
 *          joins COUNT consecutive IPv4 groups from GROUP on IFNAME as join does, prints
 *          "joined N", and counts the datagrams to PORT that arrive for each group; on
 *          SIGUSR1 prints "groups G datagrams D" (groups with at least one datagram, and
 *          datagrams, since the last report) and starts counting anew; exits after SECONDS
 *        mcast_udp sendmany IFNAME GROUP COUNT PORT ROUNDS INTERVAL_MS
 *          sends ROUNDS datagrams to each of COUNT consecutive IPv4 groups from GROUP (a
 *          round through all groups at a time), INTERVAL_MS between rounds, out of
 *          IFNAME; prints "sent N"
 * GROUP is an IPv4 or IPv6 multicast address (IPv4 only for join, count and sendmany).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int fail(const char *what)
{
	fprintf(stderr, "mcast_udp: %s: %s\n", what, strerror(errno));
	return 1;
}

static long now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* The join mode: many groups held at once, so that an interface's list grows long. */
static int join_many(const char *ifname, const char *first, int count, int seconds)
{
	struct ip_mreqn m = { .imr_ifindex = if_nametoindex(ifname) };
	struct in_addr group;
	int fd = -1, joined = 0;

	if (!m.imr_ifindex)
		return fail(ifname);
	if (inet_pton(AF_INET, first, &group) != 1) {
		fprintf(stderr, "mcast_udp: %s is not an IPv4 address\n", first);
		return 2;
	}
	for (int i = 0; i < count; i++) {
		if (i % 20 == 0) {
			fd = socket(AF_INET, SOCK_DGRAM, 0);
			if (fd < 0)
				return fail("socket");
		}
		m.imr_multiaddr.s_addr = htonl(ntohl(group.s_addr) + i);
		if (setsockopt(fd, IPPROTO_IP, IP_ADD_MEMBERSHIP, &m, sizeof(m)))
			return fail("join");
		joined++;
	}
	printf("joined %d\n", joined);
	fflush(stdout);
	sleep(seconds);
	return 0;
}

static volatile sig_atomic_t report_asked;

static void ask_report(int sig)
{
	(void)sig;
	report_asked = 1;
}

/* The count mode: which of many groups the datagrams arrive for. */
static int count_many(const char *ifname, const char *first, int count, int port, int seconds)
{
	struct sockaddr_in any = { .sin_family = AF_INET, .sin_port = htons(port) };
	struct in_addr group;
	unsigned int *seen;
	int fd, one = 1;
	long deadline;

	if (inet_pton(AF_INET, first, &group) != 1 || count <= 0) {
		fprintf(stderr, "mcast_udp: %s is not an IPv4 address\n", first);
		return 2;
	}
	seen = calloc(count, sizeof(*seen));
	fd = socket(AF_INET, SOCK_DGRAM, 0);
	if (!seen || fd < 0)
		return fail("socket");
	if (setsockopt(fd, IPPROTO_IP, IP_PKTINFO, &one, sizeof(one)) ||
	    bind(fd, (struct sockaddr *)&any, sizeof(any)))
		return fail("bind");
	signal(SIGUSR1, ask_report);
	/* The memberships, on sockets of their own (join_many's), in a child that holds them. */
	if (fork() == 0) {
		close(fd);
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		return join_many(ifname, first, count, seconds);
	}
	deadline = now_ms() + seconds * 1000L;
	for (;;) {
		char buf[2048], ctl[256];
		struct iovec iov = { .iov_base = buf, .iov_len = sizeof(buf) };
		struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1,
				      .msg_control = ctl, .msg_controllen = sizeof(ctl) };
		struct pollfd p = { .fd = fd, .events = POLLIN };
		struct cmsghdr *c;
		long left = deadline - now_ms();

		if (report_asked) {
			int groups = 0;
			unsigned long datagrams = 0;

			for (int i = 0; i < count; i++) {
				groups += seen[i] > 0;
				datagrams += seen[i];
			}
			printf("groups %d datagrams %lu\n", groups, datagrams);
			fflush(stdout);
			memset(seen, 0, count * sizeof(*seen));
			report_asked = 0;
		}
		if (left <= 0)
			break;
		if (poll(&p, 1, left < 200 ? left : 200) <= 0 || recvmsg(fd, &msg, 0) < 0)
			continue;
		for (c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
			struct in_pktinfo *pi = (struct in_pktinfo *)CMSG_DATA(c);
			long i;

			if (c->cmsg_level != IPPROTO_IP || c->cmsg_type != IP_PKTINFO)
				continue;
			i = (long)ntohl(pi->ipi_addr.s_addr) - (long)ntohl(group.s_addr);
			if (i >= 0 && i < count)
				seen[i]++;
		}
	}
	return 0;
}

/* The sendmany mode: a few datagrams to each of many groups. */
static int send_many(const char *ifname, const char *first, int count, int port, int rounds,
		     int interval_ms)
{
	struct ip_mreqn via = { .imr_ifindex = if_nametoindex(ifname) };
	struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons(port) };
	struct in_addr group;
	int fd, sent = 0;

	if (!via.imr_ifindex)
		return fail(ifname);
	if (inet_pton(AF_INET, first, &group) != 1) {
		fprintf(stderr, "mcast_udp: %s is not an IPv4 address\n", first);
		return 2;
	}
	fd = socket(AF_INET, SOCK_DGRAM, 0);
	if (fd < 0 || setsockopt(fd, IPPROTO_IP, IP_MULTICAST_IF, &via, sizeof(via)))
		return fail("multicast interface");
	for (int r = 0; r < rounds; r++) {
		if (r)
			usleep(interval_ms * 1000);
		for (int i = 0; i < count; i++) {
			char msg[64];
			int n = snprintf(msg, sizeof(msg), "ipoib-rs multicast %d/%d", i, r);

			to.sin_addr.s_addr = htonl(ntohl(group.s_addr) + i);
			if (sendto(fd, msg, n, 0, (struct sockaddr *)&to, sizeof(to)) == n)
				sent++;
		}
	}
	printf("sent %d\n", sent);
	return sent == count * rounds ? 0 : 1;
}

int main(int argc, char **argv)
{
	struct sockaddr_storage ss = { 0 };
	struct sockaddr_in *sin = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;
	socklen_t len;
	unsigned int ifindex;
	int fd, v6, port, a, b, one = 1;

	if (argc == 6 && !strcmp(argv[1], "join"))
		return join_many(argv[2], argv[3], atoi(argv[4]), atoi(argv[5]));
	if (argc == 7 && !strcmp(argv[1], "count"))
		return count_many(argv[2], argv[3], atoi(argv[4]), atoi(argv[5]), atoi(argv[6]));
	if (argc == 8 && !strcmp(argv[1], "sendmany"))
		return send_many(argv[2], argv[3], atoi(argv[4]), atoi(argv[5]), atoi(argv[6]),
				 atoi(argv[7]));
	if (argc != 7 || (strcmp(argv[1], "recv") && strcmp(argv[1], "send"))) {
		fprintf(stderr, "usage: %s recv IFNAME GROUP PORT SECONDS MAX\n"
				"       %s send IFNAME GROUP PORT COUNT INTERVAL_MS\n"
				"       %s join IFNAME GROUP COUNT SECONDS\n"
				"       %s count IFNAME GROUP COUNT PORT SECONDS\n"
				"       %s sendmany IFNAME GROUP COUNT PORT ROUNDS INTERVAL_MS\n",
			argv[0], argv[0], argv[0], argv[0], argv[0]);
		return 2;
	}
	ifindex = if_nametoindex(argv[2]);
	if (!ifindex)
		return fail(argv[2]);
	port = atoi(argv[4]);
	a = atoi(argv[5]);
	b = atoi(argv[6]);
	if (inet_pton(AF_INET, argv[3], &sin->sin_addr) == 1) {
		v6 = 0;
		sin->sin_family = AF_INET;
		sin->sin_port = htons(port);
		len = sizeof(*sin);
	} else if (inet_pton(AF_INET6, argv[3], &sin6->sin6_addr) == 1) {
		v6 = 1;
		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons(port);
		sin6->sin6_scope_id = ifindex;
		len = sizeof(*sin6);
	} else {
		fprintf(stderr, "mcast_udp: %s is not an address\n", argv[3]);
		return 2;
	}
	fd = socket(ss.ss_family, SOCK_DGRAM, 0);
	if (fd < 0)
		return fail("socket");

	if (!strcmp(argv[1], "send")) {
		struct ip_mreqn via = { .imr_ifindex = ifindex };
		int sent = 0, err;

		if (v6)
			err = setsockopt(fd, IPPROTO_IPV6, IPV6_MULTICAST_IF, &ifindex,
					 sizeof(ifindex));
		else
			err = setsockopt(fd, IPPROTO_IP, IP_MULTICAST_IF, &via, sizeof(via));
		if (err)
			return fail("multicast interface");
		for (int i = 0; i < a; i++) {
			char msg[64];
			int n = snprintf(msg, sizeof(msg), "ipoib-rs multicast %d", i);

			if (sendto(fd, msg, n, 0, (struct sockaddr *)&ss, len) == n)
				sent++;
			usleep(b * 1000);
		}
		printf("sent %d\n", sent);
		return sent == a ? 0 : 1;
	}

	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&ss, len))
		return fail("bind");
	if (v6) {
		struct ipv6_mreq m = { .ipv6mr_multiaddr = sin6->sin6_addr,
				       .ipv6mr_interface = ifindex };

		if (setsockopt(fd, IPPROTO_IPV6, IPV6_JOIN_GROUP, &m, sizeof(m)))
			return fail("join");
	} else {
		struct ip_mreqn m = { .imr_multiaddr = sin->sin_addr, .imr_ifindex = ifindex };

		if (setsockopt(fd, IPPROTO_IP, IP_ADD_MEMBERSHIP, &m, sizeof(m)))
			return fail("join");
	}
	printf("joined %s on %s\n", argv[3], argv[2]);
	fflush(stdout);

	long deadline = now_ms() + a * 1000L;
	int received = 0;

	while (received < b) {
		long left = deadline - now_ms();
		struct pollfd p = { .fd = fd, .events = POLLIN };
		char buf[2048];

		if (left <= 0 || poll(&p, 1, left) <= 0)
			break;
		if (recv(fd, buf, sizeof(buf), 0) > 0)
			received++;
	}
	printf("received %d\n", received);
	close(fd);
	return 0;
}
