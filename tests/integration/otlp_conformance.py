# SPDX-License-Identifier: MIT
"""The OTLP Profiles conformance rules every request we produce must keep (our own checker;
the rules are the public ones of the profiling SIG's `profcheck` and the comments of
profiles.proto).

    problems = check(req)   # req: a decoded ExportProfilesServiceRequest or ProfilesData
    # ["dictionary-zero-value: link_table[0]: not the zero value (trace_id 16 bytes)", ...]

Each problem starts with the name of the rule it breaks (RULES). The checker reads the message
through its fields only, so it works on any generated module of the same proto.
"""

RULES = {
    "non-empty": "resource, scope and profile levels are not empty",
    "dictionary-zero-value": "index 0 of every dictionary table holds the zero value, "
                             "string_table[0] is \"\"",
    "string-table-unique": "no string twice in the string table",
    "index-in-range": "every stack, location, mapping, function, attribute, link and string "
                      "index points into its table",
    "attribute-key-unique": "no attribute key twice on one sample, profile, mapping or location",
    "mapping-range": "a mapping's memory_start < memory_limit unless both are 0",
    "not-negative": "lines, columns and start lines are not negative",
    "link-id-size": "a link has a 16-byte trace ID and an 8-byte span ID",
    "sample-values": "a sample has values or timestamps, the same count of each when both, one "
                     "aggregated value when no timestamps",
    "sample-timestamp": "a sample's timestamps are inside [time_unix_nano, time_unix_nano + "
                        "duration_nano)",
    "sample-shape": "every sample of a profile has the same shape: timestamps only, one aggregated "
                    "value, or values paired with timestamps",
}

TABLES = ("mapping_table", "location_table", "function_table", "link_table", "string_table",
          "attribute_table", "stack_table")


class _Checker:
    def __init__(self, req):
        self.req = req
        self.d = req.dictionary
        self.problems = []

    def fail(self, rule, where, message):
        assert rule in RULES, rule
        self.problems.append(f"{rule}: {where}: {message}")

    def index(self, where, i, table, zero_ok=True):
        n = len(getattr(self.d, table))
        if not 0 <= i < n:
            self.fail("index-in-range", where, f"{i} is outside {table} ({n} entries)")
            return False
        if i == 0 and not zero_ok:
            self.fail("index-in-range", where, f"0 (the zero value) of {table} where an entry is needed")
            return False
        return True

    def attributes(self, where, indices):
        keys = set()
        for i in indices:
            if not self.index(f"{where}.attribute_indices", i, "attribute_table", zero_ok=False):
                continue
            key = self.d.attribute_table[i].key_strindex
            if key in keys:
                name = self.d.string_table[key] if 0 <= key < len(self.d.string_table) else key
                self.fail("attribute-key-unique", where, f"key {name!r} twice")
            keys.add(key)

    def not_negative(self, where, **values):
        for name, v in values.items():
            if v < 0:
                self.fail("not-negative", where, f"{name} {v}")

    def dictionary(self):
        d = self.d
        for name in TABLES:
            t = getattr(d, name)
            if len(t) == 0:
                self.fail("dictionary-zero-value", name, "empty: no zero value at index 0")
            elif name == "string_table":
                if t[0] != "":
                    self.fail("dictionary-zero-value", "string_table[0]", f"{t[0]!r}, not \"\"")
            elif t[0].ByteSize() != 0:
                self.fail("dictionary-zero-value", f"{name}[0]",
                          f"not the zero value ({str(t[0]).strip() or 'set fields'})".replace("\n", ", "))
        seen = set()
        for i, s in enumerate(d.string_table):
            if s in seen:
                self.fail("string-table-unique", f"string_table[{i}]", f"{s!r} again")
            seen.add(s)

        for i, a in enumerate(d.attribute_table[1:], 1):
            where = f"attribute_table[{i}]"
            self.index(f"{where}.key_strindex", a.key_strindex, "string_table", zero_ok=False)
            self.index(f"{where}.unit_strindex", a.unit_strindex, "string_table")
            if a.value.WhichOneof("value") == "string_value_strindex":
                self.index(f"{where}.value.string_value_strindex", a.value.string_value_strindex,
                           "string_table")
        for i, m in enumerate(d.mapping_table[1:], 1):
            where = f"mapping_table[{i}]"
            self.index(f"{where}.filename_strindex", m.filename_strindex, "string_table")
            self.attributes(where, m.attribute_indices)
            if (m.memory_start or m.memory_limit) and not m.memory_start < m.memory_limit:
                self.fail("mapping-range", where,
                          f"memory_start {m.memory_start:#x} >= memory_limit {m.memory_limit:#x}")
        for i, f in enumerate(d.function_table[1:], 1):
            where = f"function_table[{i}]"
            for field in ("name_strindex", "system_name_strindex", "filename_strindex"):
                self.index(f"{where}.{field}", getattr(f, field), "string_table")
            self.not_negative(where, start_line=f.start_line)
        for i, loc in enumerate(d.location_table[1:], 1):
            where = f"location_table[{i}]"
            self.index(f"{where}.mapping_index", loc.mapping_index, "mapping_table")
            for j, line in enumerate(loc.lines):
                self.index(f"{where}.lines[{j}].function_index", line.function_index, "function_table")
                self.not_negative(f"{where}.lines[{j}]", line=line.line, column=line.column)
            self.attributes(where, loc.attribute_indices)
        for i, link in enumerate(d.link_table[1:], 1):
            if len(link.trace_id) != 16 or len(link.span_id) != 8:
                self.fail("link-id-size", f"link_table[{i}]",
                          f"trace_id {len(link.trace_id)} bytes, span_id {len(link.span_id)} bytes")
        for i, st in enumerate(d.stack_table[1:], 1):
            for j, li in enumerate(st.location_indices):
                self.index(f"stack_table[{i}].location_indices[{j}]", li, "location_table", zero_ok=False)

    def profile(self, where, prof):
        self.index(f"{where}.sample_type.type_strindex", prof.sample_type.type_strindex, "string_table")
        self.index(f"{where}.sample_type.unit_strindex", prof.sample_type.unit_strindex, "string_table")
        self.index(f"{where}.period_type.type_strindex", prof.period_type.type_strindex, "string_table")
        self.index(f"{where}.period_type.unit_strindex", prof.period_type.unit_strindex, "string_table")
        self.attributes(where, prof.attribute_indices)
        start, end = prof.time_unix_nano, prof.time_unix_nano + prof.duration_nano
        shape = None
        for k, s in enumerate(prof.samples):
            sw = f"{where}.samples[{k}]"
            self.index(f"{sw}.stack_index", s.stack_index, "stack_table")
            self.index(f"{sw}.link_index", s.link_index, "link_table")
            self.attributes(sw, s.attribute_indices)
            n_values, n_times = len(s.values), len(s.timestamps_unix_nano)
            if not n_values and not n_times:
                self.fail("sample-values", sw, "neither values nor timestamps")
            elif n_values and n_times and n_values != n_times:
                self.fail("sample-values", sw, f"{n_values} values but {n_times} timestamps")
            elif n_values > 1 and not n_times:
                self.fail("sample-values", sw, f"{n_values} values without timestamps (one aggregate expected)")
            kind = "timestamps" if not n_values else "paired" if n_times else "aggregate"
            if shape is None:
                shape = kind
            elif kind != shape:
                self.fail("sample-shape", sw, f"{kind}, while the profile's first sample is {shape}")
            for t in s.timestamps_unix_nano:
                if not start <= t < end:
                    self.fail("sample-timestamp", sw, f"{t} outside [{start}, {end})")
                    break

    def run(self):
        self.dictionary()
        if not self.req.resource_profiles:
            self.fail("non-empty", "request", "no resource_profiles")
        for i, rp in enumerate(self.req.resource_profiles):
            for j, kv in enumerate(rp.resource.attributes):
                where = f"resource_profiles[{i}].resource.attributes[{j}]"
                self.index(f"{where}.key_strindex", kv.key_strindex, "string_table")
                if kv.value.WhichOneof("value") == "string_value_strindex":
                    self.index(f"{where}.value.string_value_strindex", kv.value.string_value_strindex,
                               "string_table")
            if not rp.scope_profiles:
                self.fail("non-empty", f"resource_profiles[{i}]", "no scope_profiles")
            for j, sp in enumerate(rp.scope_profiles):
                if not sp.profiles:
                    self.fail("non-empty", f"resource_profiles[{i}].scope_profiles[{j}]", "no profiles")
                for k, prof in enumerate(sp.profiles):
                    self.profile(f"resource_profiles[{i}].scope_profiles[{j}].profiles[{k}]", prof)
        return self.problems


def check(req):
    """The problems of one request, each "rule: where: what" (empty when it conforms)."""
    return _Checker(req).run()
