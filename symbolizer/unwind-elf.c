/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "macro.h"
#include "unwind-elf.h"

int ep_unwind_elf_open(int fd, EpUnwindElf *ret) {
        EpUnwindElf e = { .fd = fd };
        struct stat st;
        size_t phnum;

        if (fstat(fd, &st) < 0)
                return -errno;
        if (!S_ISREG(st.st_mode) || st.st_size < (off_t) EI_NIDENT)
                return -ENOEXEC;
        e.file_size = (uint64_t) st.st_size;

        /* libelf keeps a per-process version; setting it is idempotent and cheap. */
        if (elf_version(EV_CURRENT) == EV_NONE)
                return -ENOTSUP;
        e.elf = elf_begin(fd, ELF_C_READ, NULL);
        if (!e.elf)
                return -ENOEXEC;
        if (elf_kind(e.elf) != ELF_K_ELF || !gelf_getehdr(e.elf, &e.ehdr) || elf_getphdrnum(e.elf, &phnum) < 0) {
                elf_end(e.elf);
                return -ENOEXEC;
        }

        for (size_t i = 0; i < phnum; i++) {
                GElf_Phdr ph;

                if (!gelf_getphdr(e.elf, (int) i, &ph))
                        continue;
                if (ph.p_type == PT_INTERP)
                        e.has_interp = true;
                if (ph.p_type != PT_LOAD || !(ph.p_flags & PF_X) || ph.p_filesz == 0)
                        continue;
                if (ph.p_offset > e.file_size || ph.p_filesz > e.file_size - ph.p_offset ||
                    ph.p_vaddr + ph.p_filesz < ph.p_vaddr)
                        continue; /* claims bytes the file does not have */
                if (e.n_exec == EP_UNWIND_MAX_EXEC_SEGMENTS)
                        break;
                e.exec[e.n_exec++] = (EpUnwindSegment) {
                        .vaddr = ph.p_vaddr,
                        .offset = ph.p_offset,
                        .filesz = ph.p_filesz,
                };
        }

        *ret = e;
        return 0;
}

void ep_unwind_elf_close(EpUnwindElf *e) {
        if (e->elf)
                elf_end(e->elf);
        e->elf = NULL;
}

Elf_Scn *ep_unwind_elf_section(const EpUnwindElf *e, const char *name, GElf_Shdr *ret_shdr) {
        Elf_Scn *scn = NULL;
        size_t shstrndx;

        if (elf_getshdrstrndx(e->elf, &shstrndx) < 0)
                return NULL;
        while ((scn = elf_nextscn(e->elf, scn))) {
                GElf_Shdr sh;
                const char *n;

                if (!gelf_getshdr(scn, &sh))
                        continue;
                n = elf_strptr(e->elf, shstrndx, sh.sh_name);
                if (n && streq(n, name)) {
                        if (ret_shdr)
                                *ret_shdr = sh;
                        return scn;
                }
        }
        return NULL;
}

static bool scan_notes(Elf_Data *data, uint8_t ret[EP_BUILD_ID_MAX], size_t *ret_len) {
        size_t off = 0, next, name_off, desc_off;
        GElf_Nhdr nh;

        while (data && off < data->d_size && (next = gelf_getnote(data, off, &nh, &name_off, &desc_off)) > 0) {
                if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 &&
                    memcmp((const char *) data->d_buf + name_off, "GNU", 4) == 0 && nh.n_descsz > 0 &&
                    nh.n_descsz <= EP_BUILD_ID_MAX) {
                        memcpy(ret, (const uint8_t *) data->d_buf + desc_off, nh.n_descsz);
                        *ret_len = nh.n_descsz;
                        return true;
                }
                off = next;
        }
        return false;
}

int ep_unwind_elf_build_id(const EpUnwindElf *e, uint8_t ret[EP_BUILD_ID_MAX], size_t *ret_len) {
        Elf_Scn *scn = NULL;
        size_t phnum;

        if (elf_getphdrnum(e->elf, &phnum) == 0)
                for (size_t i = 0; i < phnum; i++) {
                        GElf_Phdr ph;

                        if (!gelf_getphdr(e->elf, (int) i, &ph) || ph.p_type != PT_NOTE)
                                continue;
                        if (ph.p_offset > e->file_size || ph.p_filesz > e->file_size - ph.p_offset ||
                            ph.p_filesz > (1u << 20))
                                continue;
                        Elf_Data *d = elf_getdata_rawchunk(e->elf, (int64_t) ph.p_offset, ph.p_filesz,
                                                           ph.p_align == 8 ? ELF_T_NHDR8 : ELF_T_NHDR);
                        if (scan_notes(d, ret, ret_len))
                                return 0;
                }

        while ((scn = elf_nextscn(e->elf, scn))) {
                GElf_Shdr sh;
                if (gelf_getshdr(scn, &sh) && sh.sh_type == SHT_NOTE &&
                    scan_notes(elf_getdata(scn, NULL), ret, ret_len))
                        return 0;
        }
        return -ENOENT;
}

int ep_unwind_elf_debuglink(const EpUnwindElf *e, char ret_name[256], uint32_t *ret_crc) {
        GElf_Shdr sh;
        Elf_Scn *scn = ep_unwind_elf_section(e, ".gnu_debuglink", &sh);
        Elf_Data *d;
        size_t len;

        if (!scn || sh.sh_type == SHT_NOBITS)
                return -ENOENT;
        d = elf_getdata(scn, NULL);
        if (!d || !d->d_buf || d->d_size < 2)
                return -ENOENT;

        /* name, NUL, padding to 4, CRC-32 (file byte order) */
        len = strnlen(d->d_buf, d->d_size);
        if (len == 0 || len >= 256 || len == d->d_size || memchr(d->d_buf, '/', len) ||
            streq((const char *) d->d_buf, ".") || streq((const char *) d->d_buf, ".."))
                return -ENOENT;
        size_t crc_off = (len + 1 + 3) & ~(size_t) 3;
        if (crc_off + 4 > d->d_size)
                return -ENOENT;

        const uint8_t *c = (const uint8_t *) d->d_buf + crc_off;
        if (e->ehdr.e_ident[EI_DATA] == ELFDATA2MSB)
                *ret_crc = (uint32_t) c[0] << 24 | (uint32_t) c[1] << 16 | (uint32_t) c[2] << 8 | c[3];
        else
                *ret_crc = (uint32_t) c[3] << 24 | (uint32_t) c[2] << 16 | (uint32_t) c[1] << 8 | c[0];
        memcpy(ret_name, d->d_buf, len);
        ret_name[len] = 0;
        return 0;
}

static const EpUnwindSegment *segment_of(const EpUnwindElf *e, uint64_t vaddr) {
        for (size_t i = 0; i < e->n_exec; i++)
                if (vaddr >= e->exec[i].vaddr && vaddr - e->exec[i].vaddr < e->exec[i].filesz)
                        return &e->exec[i];
        return NULL;
}

bool ep_unwind_elf_to_offsets(const EpUnwindElf *e, uint64_t start, uint64_t end, uint64_t *ret_start,
                              uint64_t *ret_end) {
        const EpUnwindSegment *s = segment_of(e, start);

        if (!s || end <= start)
                return false;
        end = MIN(end, s->vaddr + s->filesz);
        *ret_start = start - s->vaddr + s->offset;
        *ret_end = end - s->vaddr + s->offset;
        return true;
}

int ep_unwind_elf_read_code(const EpUnwindElf *e, uint64_t vaddr, void *buf, size_t n) {
        const EpUnwindSegment *s = segment_of(e, vaddr);
        ssize_t k;

        if (!s || s->vaddr + s->filesz - vaddr < n)
                return -ENXIO;
        k = pread(e->fd, buf, n, (off_t) (vaddr - s->vaddr + s->offset));
        if (k < 0)
                return -errno;
        return (size_t) k == n ? 0 : -EIO;
}
