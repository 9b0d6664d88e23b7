// SPDX-License-Identifier: GPL-2.0
/*
 * ib_frame: sends malformed InfiniBand frames (ethertype 0x88B5, the framing
 * of rxe_ib) out of an Ethernet interface, each of which the receiving port
 * must drop and count. Usage: ib_frame IFNAME DLID
 * Prints the number of frames sent; exits non-zero if one could not be sent.
 */
#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define ETHERTYPE_IB 0x88B5
#define LNH_LOCAL 2
#define LNH_GLOBAL 3

/* LRH (8 bytes) for a packet of len bytes from LRH through ICRC. */
static void lrh(uint8_t *p, uint8_t lver, uint8_t lnh, uint16_t dlid,
		uint16_t words, uint16_t slid)
{
	p[0] = lver & 0xf;
	p[1] = lnh & 3;
	p[2] = dlid >> 8;
	p[3] = dlid;
	p[4] = (words >> 8) & 0x7;
	p[5] = words;
	p[6] = slid >> 8;
	p[7] = slid;
}

/* BTH + DETH of a UD send to QP1, then 4 bytes of payload and a wrong ICRC. */
static int ud_to_qp1(uint8_t *p)
{
	memset(p, 0, 28);
	p[0] = 0x64;			/* UD SEND only */
	p[2] = 0xff;			/* P_Key 0xffff */
	p[3] = 0xff;
	p[7] = 1;			/* destination QP 1 */
	p[12] = 0x80;			/* Q_Key 0x80010000 (GSI) */
	p[13] = 0x01;
	p[19] = 1;			/* source QP 1 */
	memset(p + 20, 0xa5, 4);	/* payload */
	memset(p + 24, 0x5a, 4);	/* not the ICRC */
	return 28;
}

int main(int argc, char **argv)
{
	struct sockaddr_ll to = { .sll_family = AF_PACKET };
	uint8_t frames[7][128];
	int lens[7], i, fd, sent = 0;
	uint16_t dlid;

	if (argc != 3) {
		fprintf(stderr, "usage: %s IFNAME DLID\n", argv[0]);
		return 2;
	}
	dlid = strtoul(argv[2], NULL, 0);
	memset(frames, 0, sizeof(frames));

	/* 1: shorter than an LRH */
	lens[0] = 4;
	/* 2: link version 1 */
	lrh(frames[1], 1, LNH_LOCAL, dlid, 9, 1);
	lens[1] = 8 + ud_to_qp1(frames[1] + 8);
	/* 3: raw (non-IBA) next header */
	lrh(frames[2], 0, 0, dlid, 9, 1);
	lens[2] = 8 + ud_to_qp1(frames[2] + 8);
	/* 4: packet length beyond the frame */
	lrh(frames[3], 0, LNH_LOCAL, dlid, 100, 1);
	lens[3] = 8 + ud_to_qp1(frames[3] + 8);
	/* 5: addressed to the port, wrong ICRC */
	lrh(frames[4], 0, LNH_LOCAL, dlid, 9, 1);
	lens[4] = 8 + ud_to_qp1(frames[4] + 8);
	/* 6: a unicast LID that is not the port's */
	lrh(frames[5], 0, LNH_LOCAL, dlid ^ 0x0100, 9, 1);
	lens[5] = 8 + ud_to_qp1(frames[5] + 8);
	/* 7: multicast LID without a GRH */
	lrh(frames[6], 0, LNH_LOCAL, 0xc001, 9, 1);
	lens[6] = 8 + ud_to_qp1(frames[6] + 8);

	fd = socket(AF_PACKET, SOCK_DGRAM, htons(ETHERTYPE_IB));
	if (fd < 0) {
		perror("socket");
		return 1;
	}
	to.sll_protocol = htons(ETHERTYPE_IB);
	to.sll_ifindex = if_nametoindex(argv[1]);
	to.sll_halen = 6;
	memset(to.sll_addr, 0xff, 6);
	if (!to.sll_ifindex) {
		perror(argv[1]);
		return 1;
	}
	for (i = 0; i < 7; i++) {
		if (sendto(fd, frames[i], lens[i], 0, (struct sockaddr *)&to,
			   sizeof(to)) != lens[i]) {
			perror("sendto");
			return 1;
		}
		sent++;
	}
	printf("%d\n", sent);
	close(fd);
	return 0;
}
