/*
 * clockshift: a preloaded library that moves a server's wall clock by an
 * offset another process sets while it runs, so that the chaos run's
 * nemesis can step a node's clock forward as an NTP step or an operator
 * would. Redis expires keys by its wall clock, which is what the node
 * guard's clock checks are for.
 *
 * CLOCKSHIFT_FILE names a file whose first 8 bytes are the offset in
 * nanoseconds (a little-endian int64); it is mapped shared, and the nemesis
 * stores a new offset with one aligned 8-byte atomic store into its own
 * shared mapping, so the clock moves at once and no reading sees half a
 * value. CLOCK_REALTIME (and its coarse
 * variant), gettimeofday and time are moved; the monotonic clocks are not.
 *
 * It calls the kernel directly and allocates nothing: libfaketime, which
 * resolves the real functions with dlsym, recurses into jemalloc's start-up
 * in redis-server and aborts it.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static volatile int64_t *offset_ns;

__attribute__((constructor)) static void clockshift_init(void) {
	const char *path = getenv("CLOCKSHIFT_FILE");
	if (path == NULL) {
		return;
	}
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		return;
	}
	void *m = mmap(NULL, sizeof(int64_t), PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (m != MAP_FAILED) {
		offset_ns = m;
	}
}

static void shift(struct timespec *ts) {
	if (offset_ns == NULL) {
		return;
	}
	int64_t ns = (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec + *offset_ns;
	ts->tv_sec = ns / 1000000000;
	ts->tv_nsec = ns % 1000000000;
}

int clock_gettime(clockid_t clk, struct timespec *ts) {
	long r = syscall(SYS_clock_gettime, clk, ts);
	if (r == 0 && (clk == CLOCK_REALTIME || clk == CLOCK_REALTIME_COARSE)) {
		shift(ts);
	}
	return (int)r;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
	(void)tz;
	struct timespec ts;
	if (clock_gettime(CLOCK_REALTIME, &ts) != 0) {
		return -1;
	}
	tv->tv_sec = ts.tv_sec;
	tv->tv_usec = ts.tv_nsec / 1000;
	return 0;
}

time_t time(time_t *t) {
	struct timespec ts;
	if (clock_gettime(CLOCK_REALTIME, &ts) != 0) {
		return (time_t)-1;
	}
	if (t != NULL) {
		*t = ts.tv_sec;
	}
	return ts.tv_sec;
}
