/* SPDX-License-Identifier: MIT */
/* Spends most of its time in the kernel: large reads from /dev/zero. Usage: syscalls SECONDS */
#include <fcntl.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static char buf[1 << 20];

static double now(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) void read_zeroes(int fd, double until) {
        while (now() < until)
                if (read(fd, buf, sizeof buf) < 0)
                        exit(1);
}

int main(int argc, char **argv) {
        double seconds = argc > 1 ? atof(argv[1]) : 5;
        int fd = open("/dev/zero", O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return 1;
        read_zeroes(fd, now() + seconds);
        return 0;
}
