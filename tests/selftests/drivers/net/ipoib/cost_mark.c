// SPDX-License-Identifier: GPL-2.0
/*
 * cost_mark: starts or stops a counting window of the ipoib-cost QEMU plugin
 * (bench/cost-plugin, scripts/bench.sh --cost). The plugin watches for one no-op,
 * nopl disp32(%rax,%rax,1), whose displacement is 0x1b0c0000 | op << 12 | window (op 1
 * start, 2 stop); the window is only known at run time, so the no-op is written into a page
 * of its own and called. Outside the plugin it does nothing.
 *
 * Usage: cost_mark start|stop WINDOW   (WINDOW 0..4095)
 *        cost_mark spin WINDOW N         window WINDOW around a loop of N iterations of
 *                                        two instructions: 2N in user space, a known count
 *                                        to check the plugin by
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* The page holding the marks of WINDOW: start at offset 0, stop at 16, each returning. */
static void (*marks(uint32_t window))(void)
{
	unsigned char *page;
	uint32_t op, code;

	page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (page == MAP_FAILED) {
		perror("cost_mark: mmap");
		return NULL;
	}
	for (op = 1; op <= 2; op++) {
		unsigned char *m = page + (op - 1) * 16;

		code = 0x1b0c0000 | op << 12 | window;
		/* nopl disp32(%rax,%rax,1); ret */
		m[0] = 0x0f;
		m[1] = 0x1f;
		m[2] = 0x84;
		m[3] = 0x00;
		memcpy(m + 4, &code, 4);
		m[8] = 0xc3;
	}
	if (mprotect(page, 4096, PROT_READ | PROT_EXEC)) {
		perror("cost_mark: mprotect");
		return NULL;
	}
	return (void (*)(void))page;
}

static int number(const char *s, unsigned long max, unsigned long *v)
{
	char *end;

	*v = strtoul(s, &end, 0);
	return *s != '\0' && *end == '\0' && *v <= max;
}

int main(int argc, char **argv)
{
	unsigned long window, n = 0;
	void (*page)(void);
	int spin;

	spin = argc == 4 && !strcmp(argv[1], "spin");
	if (!spin && (argc != 3 || (strcmp(argv[1], "start") && strcmp(argv[1], "stop")))) {
		fprintf(stderr, "usage: %s start|stop WINDOW | spin WINDOW N\n", argv[0]);
		return 2;
	}
	if (!number(argv[2], 0xfff, &window) || (spin && (!number(argv[3], ~0UL, &n) || !n))) {
		fprintf(stderr, "cost_mark: WINDOW 0 to 4095, N a positive number\n");
		return 2;
	}
	page = marks(window);
	if (!page)
		return 1;
	if (!spin) {
		(strcmp(argv[1], "start") ? (void (*)(void))((char *)page + 16) : page)();
		return 0;
	}
	page();
	asm volatile("1: dec %0\n\tjnz 1b" : "+r"(n));
	((void (*)(void))((char *)page + 16))();
	return 0;
}
