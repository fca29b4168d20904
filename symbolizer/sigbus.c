/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "sigbus.h"

#define N_SLOTS 512

static struct {
        uintptr_t volatile base;
        size_t volatile size;
        volatile sig_atomic_t faulted;
} slots[N_SLOTS];

static bool installed;
static uintptr_t page_size;

static void handler(int sig, siginfo_t *si, void *ctx) {
        uintptr_t a = (uintptr_t) si->si_addr;

        for (size_t i = 0; i < N_SLOTS; i++) {
                uintptr_t b = slots[i].base;
                if (b == 0 || a < b || a - b >= slots[i].size)
                        continue;

                void *p = mmap((void *) (a & ~(page_size - 1)), page_size, PROT_READ | PROT_WRITE,
                               MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
                if (p == MAP_FAILED)
                        break;
                slots[i].faulted = 1;
                return; /* the faulting read is retried and now sees zeros */
        }

        /* Not ours: let the fault kill us as it would have. */
        signal(SIGBUS, SIG_DFL);
}

int ep_sigbus_install(void) {
        struct sigaction sa = {
                .sa_sigaction = handler,
                .sa_flags = SA_SIGINFO | SA_NODEFER,
        };

        if (installed)
                return 0;
        page_size = (uintptr_t) sysconf(_SC_PAGESIZE);
        sigemptyset(&sa.sa_mask);
        if (sigaction(SIGBUS, &sa, NULL) < 0)
                return -errno;
        installed = true;
        return 0;
}

int ep_sigbus_register(void *base, size_t size) {
        if (!base || size == 0)
                return -EINVAL;
        for (int i = 0; i < N_SLOTS; i++)
                if (slots[i].base == 0) {
                        slots[i].faulted = 0;
                        slots[i].size = size;
                        slots[i].base = (uintptr_t) base;
                        return i;
                }
        return -ENOSPC;
}

void ep_sigbus_unregister(int slot) {
        if (slot < 0 || slot >= N_SLOTS)
                return;
        slots[slot].base = 0;
        slots[slot].size = 0;
        slots[slot].faulted = 0;
}

bool ep_sigbus_faulted(int slot) {
        if (slot < 0 || slot >= N_SLOTS)
                return false;
        bool f = slots[slot].faulted;
        slots[slot].faulted = 0;
        return f;
}
