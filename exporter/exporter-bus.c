/* SPDX-License-Identifier: MIT */
#include <stddef.h>

#include "bus.h"
#include "config.h"
#include "exporter.h"

static int property_get(sd_bus *bus, const char *path, const char *interface, const char *property,
                        sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        Exporter *e = userdata;
        DeliveryStats st = delivery_stats(e->delivery);
        const char *last;
        uint64_t last_ns;

        if (streq(property, "Version"))
                return sd_bus_message_append(reply, "s", EP_VERSION);
        if (streq(property, "Endpoint"))
                return sd_bus_message_append(reply, "s", e->endpoint ?: "");
        if (streq(property, "Protocol"))
                return sd_bus_message_append(reply, "s", e->config ? otlp_protocol_name(e->config->protocol) : "");
        if (streq(property, "RequestsSent"))
                return sd_bus_message_append(reply, "t", st.requests_sent);
        /* Intervals the encoder could not turn into a request are lost as well. */
        if (streq(property, "RequestsFailed"))
                return sd_bus_message_append(reply, "t", st.requests_failed + e->encode_failures);
        if (streq(property, "RequestsRetried"))
                return sd_bus_message_append(reply, "t", st.requests_retried);
        if (streq(property, "BytesSent"))
                return sd_bus_message_append(reply, "t", st.bytes_sent);
        if (streq(property, "PartialSuccessRejected"))
                return sd_bus_message_append(reply, "t", st.partial_rejected);
        if (streq(property, "SpoolBytes"))
                return sd_bus_message_append(reply, "t", st.spool_bytes);
        if (streq(property, "SpoolFiles"))
                return sd_bus_message_append(reply, "u", st.spool_files);
        if (streq(property, "SpoolDropped"))
                return sd_bus_message_append(reply, "t", st.spool_dropped);
        if (streq(property, "BackoffUntilNs"))
                return sd_bus_message_append(reply, "t", st.backoff_until_ns);
        last = exporter_last_error(e, &last_ns);
        if (streq(property, "LastError"))
                return sd_bus_message_append(reply, "s", last ?: "");
        if (streq(property, "LastErrorNs"))
                return sd_bus_message_append(reply, "t", last_ns);
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
        SD_BUS_PROPERTY("RequestsSent", "t", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("RequestsFailed", "t", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("RequestsRetried", "t", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("BytesSent", "t", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("PartialSuccessRejected", "t", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("SpoolBytes", "t", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("SpoolFiles", "u", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("SpoolDropped", "t", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("BackoffUntilNs", "t", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("LastErrorNs", "t", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("DecodeErrors", "t", NULL, offsetof(Exporter, decode_errors),
                        SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("CollectorAttached", "b", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("LastError", "s", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        /* Root's by the bus policy (units/org.ebpfprofiler.conf), and not unprivileged here: sd-bus
         * also refuses callers that have neither our UID nor root's (or CAP_SYS_ADMIN). */
        SD_BUS_METHOD("Flush", "", "", method_flush, 0),
        SD_BUS_VTABLE_END,
};
