# SPDX-License-Identifier: MIT
"""The OTLP conformance checker (otlp_conformance.py) catches each rule it names: a request
that keeps every rule passes, and one deliberately broken request per rule is caught with that
rule's name. (No profiler needed; what our own output is checked against is these rules.)"""
import pytest

import otlp_conformance
from otlp_receiver import pb

T0 = 1_700_000_000_000_000_000


def good_request():
    """A small request keeping every rule: one process, two samples, every table used."""
    req = pb.ExportProfilesServiceRequest()
    d = req.dictionary
    d.string_table.extend(["", "cpu", "nanoseconds", "main", "app.c", "/usr/bin/app",
                           "thread.name", "worker", "process.executable.build_id.htlhash"])
    d.mapping_table.add()
    m = d.mapping_table.add(memory_start=0x1000, memory_limit=0x2000, filename_strindex=5)
    d.function_table.add()
    d.function_table.add(name_strindex=3, filename_strindex=4, start_line=10)
    d.location_table.add()
    loc = d.location_table.add(mapping_index=1, address=0x1234)
    loc.lines.add(function_index=1, line=12, column=3)
    d.link_table.add()
    d.link_table.add(trace_id=bytes(range(1, 17)), span_id=bytes(range(1, 9)))
    d.attribute_table.add()
    a = d.attribute_table.add(key_strindex=6)
    a.value.string_value = "worker"
    b = d.attribute_table.add(key_strindex=8)
    b.value.string_value = "ab12"
    m.attribute_indices.append(2)
    d.stack_table.add()
    d.stack_table.add(location_indices=[1])
    prof = req.resource_profiles.add().scope_profiles.add().profiles.add(
        time_unix_nano=T0, duration_nano=10**9)
    prof.sample_type.type_strindex, prof.sample_type.unit_strindex = 1, 2
    prof.samples.add(stack_index=1, attribute_indices=[1], link_index=1, values=[2],
                     timestamps_unix_nano=[T0 + 1])
    prof.samples.add(stack_index=1, values=[1], timestamps_unix_nano=[T0 + 5])
    return req


def profile(req):
    return req.resource_profiles[0].scope_profiles[0].profiles[0]


def sample(req):
    return profile(req).samples[0]


def set_zero_link(req):
    # What our exporter sent: full-length all-zero IDs at index 0.
    req.dictionary.link_table[0].trace_id = bytes(16)
    req.dictionary.link_table[0].span_id = bytes(8)


def two_thread_names(r):
    a = r.dictionary.attribute_table.add(key_strindex=6)
    a.value.string_value = "other"
    sample(r).attribute_indices.append(len(r.dictionary.attribute_table) - 1)


BROKEN = {
    "non-empty": [
        lambda r: r.ClearField("resource_profiles"),
        lambda r: r.resource_profiles[0].ClearField("scope_profiles"),
        lambda r: r.resource_profiles[0].scope_profiles[0].ClearField("profiles"),
    ],
    "dictionary-zero-value": [
        set_zero_link,
        lambda r: r.dictionary.string_table.__setitem__(0, "x"),
        lambda r: setattr(r.dictionary.mapping_table[0], "memory_limit", 1),
        lambda r: setattr(r.dictionary.location_table[0], "address", 1),
        lambda r: setattr(r.dictionary.function_table[0], "name_strindex", 3),
        lambda r: setattr(r.dictionary.attribute_table[0], "key_strindex", 6),
        lambda r: r.dictionary.stack_table[0].location_indices.append(1),
        lambda r: r.dictionary.ClearField("link_table"),
    ],
    "string-table-unique": [lambda r: r.dictionary.string_table.append("main")],
    "index-in-range": [
        lambda r: setattr(sample(r), "stack_index", 9),
        lambda r: r.dictionary.stack_table[1].location_indices.append(7),
        lambda r: setattr(r.dictionary.location_table[1], "mapping_index", 4),
        lambda r: setattr(r.dictionary.location_table[1].lines[0], "function_index", 5),
        lambda r: sample(r).attribute_indices.append(8),
        lambda r: setattr(sample(r), "link_index", 2),
        lambda r: setattr(r.dictionary.function_table[1], "name_strindex", 99),
        lambda r: setattr(r.dictionary.attribute_table[1], "key_strindex", -1),
        lambda r: setattr(r.dictionary.attribute_table[1].value, "string_value_strindex", 50),
        lambda r: r.resource_profiles[0].resource.attributes.add(key_strindex=40),
    ],
    "attribute-key-unique": [
        two_thread_names,
        lambda r: r.dictionary.mapping_table[1].attribute_indices.append(2),
    ],
    "mapping-range": [lambda r: setattr(r.dictionary.mapping_table[1], "memory_limit", 0x1000)],
    "not-negative": [
        lambda r: setattr(r.dictionary.location_table[1].lines[0], "line", -1),
        lambda r: setattr(r.dictionary.location_table[1].lines[0], "column", -2),
        lambda r: setattr(r.dictionary.function_table[1], "start_line", -3),
    ],
    "link-id-size": [
        lambda r: setattr(r.dictionary.link_table[1], "trace_id", bytes(8)),
        lambda r: setattr(r.dictionary.link_table[1], "span_id", b""),
    ],
    "sample-values": [
        lambda r: (sample(r).ClearField("values"), sample(r).ClearField("timestamps_unix_nano")),
        lambda r: sample(r).timestamps_unix_nano.append(T0 + 3),
        lambda r: (sample(r).ClearField("timestamps_unix_nano"), sample(r).values.append(1)),
    ],
    "sample-timestamp": [
        lambda r: sample(r).timestamps_unix_nano.__setitem__(0, T0 - 1),
        lambda r: sample(r).timestamps_unix_nano.__setitem__(0, T0 + 10**9),
    ],
    "sample-shape": [
        lambda r: profile(r).samples[1].ClearField("values"),
        lambda r: profile(r).samples[1].ClearField("timestamps_unix_nano"),
    ],
}


def test_a_conforming_request_passes():
    assert otlp_conformance.check(good_request()) == []


def test_every_rule_has_broken_requests():
    assert set(BROKEN) == set(otlp_conformance.RULES)


@pytest.mark.parametrize("rule,i", [(rule, i) for rule, breaks in BROKEN.items() for i in range(len(breaks))])
def test_each_broken_request_is_caught_by_its_rule(rule, i):
    req = good_request()
    BROKEN[rule][i](req)
    problems = otlp_conformance.check(req)
    assert problems, f"{rule} #{i}: not caught"
    assert any(p.startswith(rule + ": ") for p in problems), problems
