/* SPDX-License-Identifier: MIT */
#include <stdlib.h>

#include "profile-model.h"

int exp_grow(void **p, size_t *cap, size_t need, size_t elem_size) {
        size_t want;
        void *q;

        if (need <= *cap)
                return 0;
        want = MAX(need, MAX(*cap * 2, (size_t) 16));
        if (want > SIZE_MAX / elem_size)
                return -ENOMEM;
        q = realloc(*p, want * elem_size);
        if (!q)
                return -ENOMEM;
        *p = q;
        *cap = want;
        return 0;
}

ExpInterval *exp_interval_new(uint64_t id, uint64_t start_ns, uint64_t end_ns, uint64_t period_ns) {
        ExpInterval *iv = calloc(1, sizeof *iv);
        if (!iv)
                return NULL;
        iv->id = id;
        iv->start_ns = start_ns;
        iv->end_ns = end_ns;
        iv->period_ns = period_ns;
        return iv;
}

ExpInterval *exp_interval_free(ExpInterval *iv) {
        if (!iv)
                return NULL;
        for (size_t i = 0; i < iv->n_processes; i++) {
                free(iv->processes[i].comm);
                free(iv->processes[i].exe_path);
                free(iv->processes[i].container_id);
        }
        for (size_t i = 0; i < iv->n_frames; i++) {
                ExpFrame *f = &iv->frames[i];
                for (size_t j = 0; j < f->n_lines; j++) {
                        free(f->lines[j].function);
                        free(f->lines[j].file);
                }
                free(f->lines);
                free(f->go_build_id);
                free(f->mapping_path);
        }
        for (size_t i = 0; i < iv->n_stacks; i++)
                free(iv->stacks[i].frames);
        for (size_t i = 0; i < iv->n_samples; i++) {
                free(iv->samples[i].thread_name);
                free(iv->samples[i].timestamps);
        }
        free(iv->processes);
        free(iv->frames);
        free(iv->stacks);
        free(iv->samples);
        free(iv);
        return NULL;
}

#define DEFINE_ADD(type, name, field)                                                        \
        type *name(ExpInterval *iv) {                                                        \
                type *e;                                                                     \
                if (exp_grow((void **) &iv->field, &iv->cap_##field, iv->n_##field + 1,      \
                             sizeof(type)) < 0)                                              \
                        return NULL;                                                         \
                e = &iv->field[iv->n_##field++];                                             \
                *e = (type) {};                                                              \
                return e;                                                                    \
        }
DEFINE_ADD(ExpProcess, exp_interval_add_process, processes)
DEFINE_ADD(ExpFrame, exp_interval_add_frame, frames)
DEFINE_ADD(ExpStack, exp_interval_add_stack, stacks)
DEFINE_ADD(ExpSample, exp_interval_add_sample, samples)

uint64_t exp_interval_events(const ExpInterval *iv) {
        uint64_t n = 0;
        for (size_t i = 0; i < iv->n_samples; i++)
                n += iv->samples[i].count;
        return n;
}
