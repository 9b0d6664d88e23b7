// SPDX-License-Identifier: GPL-2.0
/*
 * udp_flood: a fixed number of UDP datagrams one way, for the cost benchmark. netperf's
 * UDP_STREAM given a byte count ends on datagrams of its own that a flooded receiver may
 * lose, and then waits for an answer that never comes; here the sender just sends and the
 * receiver counts what arrives until it is stopped.
 *
 * Usage: udp_flood send ADDR PORT SIZE COUNT   prints "sent N" (the datagrams the stack took)
 *        udp_flood sink PORT                   receives until SIGTERM, then prints "received N"
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static volatile sig_atomic_t stop;

static void on_term(int sig)
{
	(void)sig;
	stop = 1;
}

static int flood(const char *addr, int port, size_t size, long count)
{
	struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons(port) };
	long i, sent = 0;
	char *buf;
	int fd;

	if (inet_pton(AF_INET, addr, &to.sin_addr) != 1) {
		fprintf(stderr, "udp_flood: %s: not an IPv4 address\n", addr);
		return 2;
	}
	buf = calloc(1, size);
	fd = socket(AF_INET, SOCK_DGRAM, 0);
	if (!buf || fd < 0) {
		perror("udp_flood");
		return 1;
	}
	for (i = 0; i < count; i++) {
		/* A blocking socket: a full send buffer waits, it does not drop. */
		if (sendto(fd, buf, size, 0, (struct sockaddr *)&to, sizeof(to)) == (ssize_t)size)
			sent++;
		else if (errno != ENOBUFS && errno != ECONNREFUSED)
			break;
	}
	printf("sent %ld\n", sent);
	return sent == count ? 0 : 1;
}

static int sink(int port)
{
	struct sockaddr_in at = { .sin_family = AF_INET, .sin_port = htons(port) };
	struct sigaction sa = { .sa_handler = on_term };
	static char buf[65536];
	long received = 0;
	int fd;

	sigaction(SIGTERM, &sa, NULL);
	fd = socket(AF_INET, SOCK_DGRAM, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&at, sizeof(at))) {
		perror("udp_flood: receiving socket");
		return 1;
	}
	printf("listening\n");
	fflush(stdout);
	while (!stop) {
		if (recv(fd, buf, sizeof(buf), 0) >= 0)
			received++;
		else if (errno != EINTR)
			break;
	}
	printf("received %ld\n", received);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 6 && !strcmp(argv[1], "send"))
		return flood(argv[2], atoi(argv[3]), strtoul(argv[4], NULL, 0), atol(argv[5]));
	if (argc == 3 && !strcmp(argv[1], "sink"))
		return sink(atoi(argv[2]));
	fprintf(stderr, "usage: %s send ADDR PORT SIZE COUNT | sink PORT\n", argv[0]);
	return 2;
}
