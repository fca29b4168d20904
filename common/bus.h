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

/* Errors a daemon answers that its callers tell apart (docs/dbus.md, "Errors"). */
#define EP_ERROR_NO_SUCH_FILE "org.ebpfprofiler.Error.NoSuchFile" /* the file or process is gone */
#define EP_ERROR_NO_RUNTIME "org.ebpfprofiler.Error.NoRuntime"    /* the process runs no runtime we walk */
#define EP_ERROR_NOT_YET "org.ebpfprofiler.Error.NotYet"          /* not known yet: ask again later */
