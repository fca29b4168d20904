/* SPDX-License-Identifier: MIT */
#pragma once

/* Well-known names on the system bus (or the private bus `ebpf-profiler run` starts). The
 * interface XML lives in docs/dbus/; docs/dbus.md describes every member. */

#define EP_BUS_LOADER "org.ebpfprofiler.Loader1"
#define EP_PATH_LOADER "/org/ebpfprofiler/Loader1"
#define EP_IFACE_LOADER "org.ebpfprofiler.Loader1"

#define EP_BUS_SYMBOLIZER "org.ebpfprofiler.Symbolizer1"
#define EP_PATH_SYMBOLIZER "/org/ebpfprofiler/Symbolizer1"
#define EP_IFACE_SYMBOLIZER "org.ebpfprofiler.Symbolizer1"

#define EP_BUS_COLLECTOR "org.ebpfprofiler.Collector1"
#define EP_PATH_COLLECTOR "/org/ebpfprofiler/Collector1"
#define EP_IFACE_COLLECTOR "org.ebpfprofiler.Collector1"

#define EP_BUS_EXPORTER "org.ebpfprofiler.Exporter1"
#define EP_PATH_EXPORTER "/org/ebpfprofiler/Exporter1"
#define EP_IFACE_EXPORTER "org.ebpfprofiler.Exporter1"
