// SPDX-License-Identifier: GPL-2.0
/*
 * udp_burst: one small UDP datagram to each IPv4 address given (broadcast ones too), back
 * to back from one socket, so that many destinations are new to the interface at once. It
 * runs pinned to its CPU at a real-time priority: work the datagrams queue on this CPU (an
 * IPoIB interface resolving their destinations) runs once the last one is sent.
 *
 * Usage: udp_burst PORT ADDR...   prints "sent N" (the datagrams the stack took)
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <sched.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	struct sockaddr_in to = { .sin_family = AF_INET };
	struct sched_param rt = { .sched_priority = 1 };
	int fd, i, on = 1, sent = 0;
	cpu_set_t here;

	if (argc < 3) {
		fprintf(stderr, "usage: %s PORT ADDR...\n", argv[0]);
		return 2;
	}
	CPU_ZERO(&here);
	CPU_SET(sched_getcpu(), &here);
	if (sched_setaffinity(0, sizeof(here), &here) ||
	    sched_setscheduler(0, SCHED_FIFO, &rt)) {
		perror("udp_burst: pinning at a real-time priority");
		return 1;
	}
	fd = socket(AF_INET, SOCK_DGRAM, 0);
	if (fd < 0) {
		perror("socket");
		return 1;
	}
	if (setsockopt(fd, SOL_SOCKET, SO_BROADCAST, &on, sizeof(on))) {
		perror("SO_BROADCAST");
		return 1;
	}
	to.sin_port = htons(atoi(argv[1]));
	for (i = 2; i < argc; i++) {
		if (inet_pton(AF_INET, argv[i], &to.sin_addr) != 1) {
			fprintf(stderr, "udp_burst: %s: not an IPv4 address\n", argv[i]);
			return 2;
		}
		if (sendto(fd, "x", 1, 0, (struct sockaddr *)&to, sizeof(to)) == 1)
			sent++;
	}
	close(fd);
	printf("sent %d\n", sent);
	return 0;
}
