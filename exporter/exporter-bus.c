/* SPDX-License-Identifier: MIT */
#include <stddef.h>

#include "bus.h"
#include "config.h"
#include "exporter.h"

static int property_get(sd_bus *bus, const char *path, const char *interface, const char *property,
                        sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        Exporter *e = userdata;

        if (streq(property, "Version"))
                return sd_bus_message_append(reply, "s", EP_VERSION);
        if (streq(property, "Endpoint"))
                return sd_bus_message_append(reply, "s", e->endpoint ?: "");
        if (streq(property, "Protocol"))
                return sd_bus_message_append(reply, "s", EXPORTER_PROTOCOL);
        if (streq(property, "LastError"))
                return sd_bus_message_append(reply, "s", e->last_error ?: "");
        if (streq(property, "CollectorAttached"))
                return sd_bus_message_append(reply, "b", exporter_collector_attached(e));
        return -ENOENT;
}

static int method_flush(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        return exporter_flush(userdata, m);
}

const sd_bus_vtable exporter_vtable[] = {
        SD_BUS_VTABLE_START(0),
        SD_BUS_PROPERTY("Version", "s", property_get, 0, SD_BUS_VTABLE_PROPERTY_CONST),
        SD_BUS_PROPERTY("Endpoint", "s", property_get, 0, SD_BUS_VTABLE_PROPERTY_CONST),
        SD_BUS_PROPERTY("Protocol", "s", property_get, 0, SD_BUS_VTABLE_PROPERTY_CONST),
        SD_BUS_PROPERTY("Intervals", "t", NULL, offsetof(Exporter, intervals),
                        SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("RequestsSent", "t", NULL, offsetof(Exporter, requests_sent),
                        SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("RequestsFailed", "t", NULL, offsetof(Exporter, requests_failed),
                        SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("BytesSent", "t", NULL, offsetof(Exporter, bytes_sent),
                        SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("DecodeErrors", "t", NULL, offsetof(Exporter, decode_errors),
                        SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("CollectorAttached", "b", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("LastError", "s", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        /* Access is restricted by the bus policy (units/org.ebpfprofiler.conf). */
        SD_BUS_METHOD("Flush", "", "", method_flush, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_VTABLE_END,
};
