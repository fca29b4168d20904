/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "bus-util.h"
#include "bus.h"
#include "cli.h"
#include "terminal-text.h"
#include "view-options.h"

static const struct {
        const char *component, *name, *path, *interface;
} services[] = {
        { "loader", EP_BUS_LOADER, EP_PATH_LOADER, EP_IFACE_LOADER },
        { "symbolizer", EP_BUS_SYMBOLIZER, EP_PATH_SYMBOLIZER, EP_IFACE_SYMBOLIZER },
        { "collector", EP_BUS_COLLECTOR, EP_PATH_COLLECTOR, EP_IFACE_COLLECTOR },
        { "exporter", EP_BUS_EXPORTER, EP_PATH_EXPORTER, EP_IFACE_EXPORTER },
};

static void json_string(FILE *f, const char *s) {
        fputc('"', f);
        for (const unsigned char *p = (const unsigned char *) s; *p; p++) {
                switch (*p) {
                case '"':
                        fputs("\\\"", f);
                        break;
                case '\\':
                        fputs("\\\\", f);
                        break;
                case '\n':
                        fputs("\\n", f);
                        break;
                case '\t':
                        fputs("\\t", f);
                        break;
                default:
                        if (*p < 0x20)
                                fprintf(f, "\\u%04x", *p);
                        else
                                fputc(*p, f);
                }
        }
        fputc('"', f);
}

/* Prints the next value of m, whatever its type. JSON or a compact text form:
 * arrays "a, b", dictionaries "k=v, k=v", structs "(a, b)". */
static int print_value(sd_bus_message *m, FILE *f, bool json) {
        const char *contents;
        char type;
        int r;

        r = sd_bus_message_peek_type(m, &type, &contents);
        if (r <= 0)
                return r < 0 ? r : -EBADMSG;

        if (type && strchr("ybnqiuxtdhsog", type)) { /* a basic type */
                union {
                        uint8_t y;
                        int b;
                        int16_t n;
                        uint16_t q;
                        int32_t i;
                        uint32_t u;
                        int64_t x;
                        uint64_t t;
                        double d;
                        int h;
                        const char *s;
                } v;

                r = sd_bus_message_read_basic(m, type, &v);
                if (r < 0)
                        return r;
                switch (type) {
                case SD_BUS_TYPE_BYTE:
                        fprintf(f, "%u", v.y);
                        break;
                case SD_BUS_TYPE_BOOLEAN:
                        fputs(v.b ? (json ? "true" : "yes") : (json ? "false" : "no"), f);
                        break;
                case SD_BUS_TYPE_INT16:
                        fprintf(f, "%" PRIi16, v.n);
                        break;
                case SD_BUS_TYPE_UINT16:
                        fprintf(f, "%" PRIu16, v.q);
                        break;
                case SD_BUS_TYPE_INT32:
                        fprintf(f, "%" PRIi32, v.i);
                        break;
                case SD_BUS_TYPE_UINT32:
                        fprintf(f, "%" PRIu32, v.u);
                        break;
                case SD_BUS_TYPE_INT64:
                        fprintf(f, "%" PRIi64, v.x);
                        break;
                case SD_BUS_TYPE_UINT64:
                        fprintf(f, "%" PRIu64, v.t);
                        break;
                case SD_BUS_TYPE_DOUBLE:
                        fprintf(f, "%g", v.d);
                        break;
                case SD_BUS_TYPE_UNIX_FD:
                        fputs(json ? "null" : "(fd)", f);
                        break;
                default: /* string, object path, signature */
                        if (json)
                                json_string(f, v.s);
                        else
                                fputs(*v.s ? v.s : "\"\"", f);
                }
                return 0;
        }

        switch (type) {
        case SD_BUS_TYPE_VARIANT:
                r = sd_bus_message_enter_container(m, type, contents);
                if (r < 0)
                        return r;
                r = print_value(m, f, json);
                if (r < 0)
                        return r;
                return sd_bus_message_exit_container(m);
        case SD_BUS_TYPE_STRUCT: {
                r = sd_bus_message_enter_container(m, type, contents);
                if (r < 0)
                        return r;
                fputs(json ? "[" : "(", f);
                for (bool first = true; (r = sd_bus_message_at_end(m, false)) == 0; first = false) {
                        if (!first)
                                fputs(", ", f);
                        r = print_value(m, f, json);
                        if (r < 0)
                                return r;
                }
                if (r < 0)
                        return r;
                fputs(json ? "]" : ")", f);
                return sd_bus_message_exit_container(m);
        }
        case SD_BUS_TYPE_ARRAY: {
                bool dict = contents[0] == SD_BUS_TYPE_DICT_ENTRY_BEGIN;
                r = sd_bus_message_enter_container(m, type, contents);
                if (r < 0)
                        return r;
                if (json)
                        fputs(dict ? "{" : "[", f);
                bool first = true;
                for (;; first = false) {
                        r = sd_bus_message_at_end(m, false);
                        if (r < 0)
                                return r;
                        if (r > 0)
                                break;
                        if (!first)
                                fputs(", ", f);
                        if (dict) {
                                _cleanup_free_ char *entry = strndup(contents + 1, strlen(contents) - 2);
                                if (!entry)
                                        return -ENOMEM;
                                r = sd_bus_message_enter_container(m, SD_BUS_TYPE_DICT_ENTRY, entry);
                                if (r < 0)
                                        return r;
                                /* JSON keys must be strings: print the key, then quote it if
                                 * it was not a string already. */
                                char key_type;
                                r = sd_bus_message_peek_type(m, &key_type, NULL);
                                if (r < 0)
                                        return r;
                                bool quote = json && key_type != SD_BUS_TYPE_STRING &&
                                             key_type != SD_BUS_TYPE_OBJECT_PATH &&
                                             key_type != SD_BUS_TYPE_SIGNATURE;
                                if (quote)
                                        fputc('"', f);
                                r = print_value(m, f, json);
                                if (r < 0)
                                        return r;
                                if (quote)
                                        fputc('"', f);
                                fputs(json ? ": " : "=", f);
                                r = print_value(m, f, json);
                                if (r < 0)
                                        return r;
                                r = sd_bus_message_exit_container(m);
                                if (r < 0)
                                        return r;
                        } else {
                                r = print_value(m, f, json);
                                if (r < 0)
                                        return r;
                        }
                }
                if (json)
                        fputs(dict ? "}" : "]", f);
                else if (first)
                        fputs("(none)", f);
                return sd_bus_message_exit_container(m);
        }
        default:
                return -EOPNOTSUPP;
        }
}

/* Prints the properties in a GetAll reply (a{sv}). */
static int print_properties(sd_bus_message *reply, FILE *f, bool json) {
        int r = sd_bus_message_enter_container(reply, SD_BUS_TYPE_ARRAY, "{sv}");
        if (r < 0)
                return r;
        if (json)
                fputs("{", f);
        for (bool first = true;; first = false) {
                const char *name;
                r = sd_bus_message_enter_container(reply, SD_BUS_TYPE_DICT_ENTRY, "sv");
                if (r < 0)
                        return r;
                if (r == 0)
                        break;
                r = sd_bus_message_read(reply, "s", &name);
                if (r < 0)
                        return r;
                if (json) {
                        fputs(first ? "" : ", ", f);
                        json_string(f, name);
                        fputs(": ", f);
                } else
                        fprintf(f, "    %-20s ", name);
                r = print_value(reply, f, json);
                if (r < 0)
                        return r;
                if (!json)
                        fputc('\n', f);
                r = sd_bus_message_exit_container(reply);
                if (r < 0)
                        return r;
        }
        if (json)
                fputs("}", f);
        return sd_bus_message_exit_container(reply);
}

/* ---- the store section ---- */

typedef struct StoreInfo {
        char *path;
        uint32_t schema;
        uint64_t bytes, first_ns, last_ns, intervals, samples;
        uint64_t age_s, size, deleted_intervals, deleted_rows, reclaimed, last_run_ns;
} StoreInfo;

static void store_info_done(StoreInfo *i) {
        free(i->path);
}

/* Reads the collector's Store* and Retention* properties. */
static int read_store_info(sd_bus *bus, StoreInfo *ret) {
        const struct {
                const char *name;
                uint64_t *value;
        } counters[] = {
                { "StoreBytes", &ret->bytes },
                { "StoreFirstNs", &ret->first_ns },
                { "StoreLastNs", &ret->last_ns },
                { "StoreIntervals", &ret->intervals },
                { "StoreSamples", &ret->samples },
                { "RetentionAge", &ret->age_s },
                { "RetentionSize", &ret->size },
                { "RetentionDeletedIntervals", &ret->deleted_intervals },
                { "RetentionDeletedRows", &ret->deleted_rows },
                { "RetentionBytesReclaimed", &ret->reclaimed },
                { "RetentionLastRunNs", &ret->last_run_ns },
        };
        int r;

        *ret = (StoreInfo) {};
        r = sd_bus_get_property_string(bus, EP_BUS_COLLECTOR, EP_PATH_COLLECTOR, EP_IFACE_COLLECTOR,
                                       "StorePath", NULL, &ret->path);
        if (r >= 0)
                r = sd_bus_get_property_trivial(bus, EP_BUS_COLLECTOR, EP_PATH_COLLECTOR, EP_IFACE_COLLECTOR,
                                                "StoreSchemaVersion", NULL, 'u', &ret->schema);
        for (size_t i = 0; r >= 0 && i < ELEMENTSOF(counters); i++)
                r = sd_bus_get_property_trivial(bus, EP_BUS_COLLECTOR, EP_PATH_COLLECTOR, EP_IFACE_COLLECTOR,
                                                counters[i].name, NULL, 't', counters[i].value);
        if (r < 0)
                store_info_done(ret);
        return r;
}

static void format_bytes(uint64_t n, char *buf, size_t size) {
        static const char *const units[] = { "KiB", "MiB", "GiB", "TiB" };
        double v = (double) n;
        size_t u = 0;

        if (n < 1024) {
                snprintf(buf, size, "%" PRIu64 " B", n);
                return;
        }
        for (v /= 1024; v >= 1024 && u + 1 < ELEMENTSOF(units); u++)
                v /= 1024;
        snprintf(buf, size, "%.1f %s", v, units[u]);
}

static void print_store_text(FILE *f, const StoreInfo *i) {
        char size[32], limit[32], reclaimed[32], age[32];

        format_bytes(i->bytes, size, sizeof(size));
        format_bytes(i->size, limit, sizeof(limit));
        format_bytes(i->reclaimed, reclaimed, sizeof(reclaimed));
        ep_format_span(i->age_s * NSEC_PER_SEC, age, sizeof(age));

        fprintf(f, "store      %s (schema %" PRIu32 ")\n", i->path, i->schema);
        fprintf(f, "    %-20s %s (file and WAL)\n", "size", size);
        if (i->intervals > 0) {
                EpViewTimes t;

                ep_view_times(&(EpStoreSummary) { .first_ns = i->first_ns, .last_ns = i->last_ns }, &t);
                fprintf(f, "    %-20s %s – %s, %s\n", "time span", t.first, t.last_shown, t.span);
        } else
                fprintf(f, "    %-20s (empty)\n", "time span");
        fprintf(f, "    %-20s %" PRIu64 "\n", "intervals", i->intervals);
        fprintf(f, "    %-20s %" PRIu64 "\n", "samples", i->samples);
        fprintf(f, "    %-20s %s, %s\n", "retention", i->age_s ? age : "no age limit",
                i->size ? limit : "no size limit");
        fprintf(f, "    %-20s %" PRIu64 " intervals (%" PRIu64 " rows), %s given back", "deleted",
                i->deleted_intervals, i->deleted_rows, reclaimed);
        if (i->last_run_ns > 0) {
                char when[64];

                ep_format_time(i->last_run_ns, when, sizeof(when));
                fprintf(f, "; last run %s", when);
        }
        fputc('\n', f);
}

static void print_store_json(FILE *f, const StoreInfo *i) {
        fputs("{\"path\": ", f);
        json_string(f, i->path);
        fprintf(f, ", \"schema_version\": %" PRIu32 ", \"bytes\": %" PRIu64 ", \"first_ns\": %" PRIu64
                ", \"last_ns\": %" PRIu64 ", \"intervals\": %" PRIu64 ", \"samples\": %" PRIu64
                ", \"retention\": {\"age_seconds\": %" PRIu64 ", \"size_bytes\": %" PRIu64
                ", \"deleted_intervals\": %" PRIu64 ", \"deleted_rows\": %" PRIu64
                ", \"bytes_reclaimed\": %" PRIu64 ", \"last_run_ns\": %" PRIu64 "}}",
                i->schema, i->bytes, i->first_ns, i->last_ns, i->intervals, i->samples, i->age_s,
                i->size, i->deleted_intervals, i->deleted_rows, i->reclaimed, i->last_run_ns);
}

static int oom(void) {
        fprintf(stderr, "ebpf-profiler status: out of memory\n");
        return 1;
}

static void help(void) {
        printf("Usage: ebpf-profiler status [--json]\n"
               "\n"
               "Shows whether the four daemons are on the bus, with all their properties, and\n"
               "what the profile store holds (from the collector).\n"
               "The bus is $DBUS_SYSTEM_BUS_ADDRESS, else the private bus of a running\n"
               "'ebpf-profiler run', else the system bus.\n"
               "Exit status: 0 when all four answer, 3 otherwise.\n"
               "\n"
               "Options:\n"
               "      --json    print JSON\n"
               "  -h, --help    show this help\n");
}

int verb_status(int argc, char **argv) {
        enum { ARG_JSON = 0x100 };
        static const struct option options[] = {
                { "json", no_argument, NULL, ARG_JSON },
                { "help", no_argument, NULL, 'h' },
                {},
        };
        bool json = false;
        int c, r;

        opterr = 0;
        while ((c = getopt_long(argc, argv, ":h", options, NULL)) >= 0)
                switch (c) {
                case 'h':
                        help();
                        return 0;
                case ARG_JSON:
                        json = true;
                        break;
                default:
                        return ep_getopt_error("status", c, argv);
                }
        if (optind < argc)
                return ep_usage_error("status", "unexpected argument '%s'", argv[optind]);

        _cleanup_(sd_bus_flush_close_unrefp) sd_bus *bus = NULL;
        _cleanup_free_ char *address = NULL;
        const char *source = NULL;
        r = ep_bus_open_for_views(&bus, &address, &source);
        if (r < 0) {
                if (json)
                        printf("{\"bus\": null, \"error\": \"%s\", \"running\": 0}\n", strerror(-r));
                else
                        printf("No D-Bus system bus answers (%s): ebpf-profiler is not running.\n"
                               "Start it with 'ebpf-profiler run' or 'systemctl start ebpf-profiler.target'.\n",
                               strerror(-r));
                return EXIT_NOT_RUNNING;
        }

        /* Build the output in memory: a failure half-way must not leave half a JSON document. */
        _cleanup_free_ char *buf = NULL;
        size_t size = 0;
        FILE *f = open_memstream(&buf, &size);
        if (!f)
                return oom();
        unsigned running = 0;

        static const struct {
                const char *source, *text;
        } sources[] = {
                { "environment", "from $DBUS_SYSTEM_BUS_ADDRESS" },
                { "run", "the private bus of 'ebpf-profiler run'" },
                { "system", "the system bus" },
        };
        const char *source_text = source;
        for (size_t i = 0; i < ELEMENTSOF(sources); i++)
                if (streq(source, sources[i].source))
                        source_text = sources[i].text;

        if (json) {
                fputs("{\"bus\": {\"address\": ", f);
                if (address)
                        json_string(f, address);
                else
                        fputs("null", f);
                fputs(", \"source\": ", f);
                json_string(f, source);
                fputs("}, \"services\": [", f);
        } else
                fprintf(f, "Bus: %s%s%s%s\n", source_text, address ? " (" : "", address ?: "", address ? ")" : "");

        for (size_t i = 0; i < ELEMENTSOF(services); i++) {
                pid_t pid = 0;
                r = ep_bus_name_owner_pid(bus, services[i].name, &pid);
                bool up = r > 0;

                _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
                sd_bus_error error = SD_BUS_ERROR_NULL;
                if (up) {
                        r = sd_bus_call_method(bus, services[i].name, services[i].path,
                                               "org.freedesktop.DBus.Properties", "GetAll", &error, &reply,
                                               "s", services[i].interface);
                        if (r >= 0)
                                running++;
                }

                if (json) {
                        fputs(i > 0 ? ", {\"name\": " : "{\"name\": ", f);
                        json_string(f, services[i].name);
                        fputs(", \"component\": ", f);
                        json_string(f, services[i].component);
                        fprintf(f, ", \"running\": %s", up && reply ? "true" : "false");
                        if (up)
                                fprintf(f, ", \"pid\": %d", (int) pid);
                        if (reply) {
                                fputs(", \"properties\": ", f);
                                r = print_properties(reply, f, true);
                                if (r < 0)
                                        fputs("null", f);
                        } else if (up) {
                                fputs(", \"error\": ", f);
                                json_string(f, error.message ?: strerror(-r));
                        }
                        fputs("}", f);
                } else {
                        fprintf(f, "%s %-10s %-28s ", up && reply ? "●" : "○", services[i].component,
                                services[i].name);
                        if (!up)
                                fputs("not running\n", f);
                        else if (!reply)
                                fprintf(f, "on the bus (pid %d) but not answering: %s\n", (int) pid,
                                        error.message ?: strerror(-r));
                        else {
                                fprintf(f, "running (pid %d)\n", (int) pid);
                                r = print_properties(reply, f, false);
                                if (r < 0)
                                        fprintf(f, "    (cannot decode the properties: %s)\n", strerror(-r));
                        }
                }
                sd_bus_error_free(&error);
        }

        /* What the store holds, from the collector (it keeps the totals; no need to open the
         * file, which the user may not be allowed to read). */
        _cleanup_(store_info_done) StoreInfo store = {};
        bool have_store = read_store_info(bus, &store) >= 0;
        if (json) {
                fputs("], \"store\": ", f);
                if (have_store)
                        print_store_json(f, &store);
                else
                        fputs("null", f);
                fprintf(f, ", \"running\": %u}\n", running);
        } else if (have_store)
                print_store_text(f, &store);
        if (fclose(f) != 0)
                return oom();
        /* The text names files and repeats the daemons' errors, which quote what processes
         * control; JSON escapes its strings itself. */
        if (json)
                fwrite(buf, 1, size, stdout);
        else
                (void) ep_terminal_text_write(stdout, buf, size);
        if (fflush(stdout) != 0)
                return 1;
        return running == ELEMENTSOF(services) ? 0 : EXIT_NOT_RUNNING;
}
