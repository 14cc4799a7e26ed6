"""ACL value types: parsing, validation, Kafka's text forms, JSON forms and filter matching."""

from __future__ import annotations

import pytest

from rill.client.security.acls import (CLUSTER_NAME, AccessControlEntry, AclBinding, AclBindingFilter, Operation,
                                       PatternType, Permission, ResourcePattern, ResourceType, binding_from_json,
                                       binding_to_json, by_pattern, check_operation, entry_from_json, entry_to_json,
                                       parse_host, parse_principal, validate_name)

LITERAL, PREFIXED, ANY, MATCH = PatternType.LITERAL, PatternType.PREFIXED, PatternType.ANY, PatternType.MATCH
TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER


def entry(principal: str = "User:alice", op: Operation = Operation.READ, permission: Permission = Permission.ALLOW,
          host: str = "*") -> AccessControlEntry:
    return AccessControlEntry(principal, host, op, permission)


@pytest.mark.parametrize("text", ["read", "Read", "READ", " read "])
def test_operations_parse_whatever_the_case(text: str) -> None:
    """Operation names parse case-insensitively."""
    assert Operation.parse(text) is Operation.READ


@pytest.mark.parametrize("text", ["ClusterAction", "CLUSTER_ACTION", "cluster-action", "clusteraction"])
def test_two_word_operations_parse_with_or_without_separators(text: str) -> None:
    """ClusterAction parses as Kafka spells it, as the enum name, and with dashes."""
    assert Operation.parse(text) is Operation.CLUSTER_ACTION


def test_an_unknown_name_lists_the_known_ones() -> None:
    """A typo is a ValueError naming the choices."""
    with pytest.raises(ValueError, match="unknown Operation 'raed'.*Read"):
        Operation.parse("raed")
    assert Permission.parse("deny") is Permission.DENY
    assert ResourceType.parse("topic") is TOPIC
    assert PatternType.parse("Prefixed") is PREFIXED


def test_values_are_kafkas_spellings() -> None:
    """Enum values are how Kafka writes them in ZooKeeper."""
    assert [Operation.DESCRIBE_CONFIGS.value, Permission.ALLOW.value, ResourceType.GROUP.value] == \
        ["DescribeConfigs", "Allow", "Group"]


@pytest.mark.parametrize("text", ["User:alice", "User:*", "User:CN=alice,O=rill", "Group:ops"])
def test_principals_are_type_colon_name(text: str) -> None:
    """Any Type:name is a principal, the wildcard and DNs included."""
    assert parse_principal(text) == text


@pytest.mark.parametrize("text", ["alice", "User:", ":alice", ""])
def test_a_principal_without_type_or_name_is_refused(text: str) -> None:
    """A principal needs both halves."""
    with pytest.raises(ValueError, match="Type:name"):
        parse_principal(text)


def test_hosts_are_ip_addresses_in_canonical_form_or_wildcard() -> None:
    """IPv4 and IPv6 addresses are kept canonical; names are refused."""
    assert parse_host("*") == "*"
    assert parse_host("10.0.0.1") == "10.0.0.1"
    assert parse_host("0:0:0:0:0:0:0:1") == "::1"
    assert entry(host="0:0::1").host == "::1"
    with pytest.raises(ValueError, match="IP address"):
        parse_host("localhost")


@pytest.mark.parametrize("kind, name, pattern", [
    (TOPIC, "orders", LITERAL), (TOPIC, "*", LITERAL), (TOPIC, "ord", PREFIXED), (TOPIC, "a" * 249, LITERAL),
    (GROUP, "billing app", LITERAL), (GROUP, "*", LITERAL), (GROUP, "bill", PREFIXED), (GROUP, "g" * 255, LITERAL),
    (CLUSTER, CLUSTER_NAME, LITERAL)])
def test_legal_names(kind: ResourceType, name: str, pattern: PatternType) -> None:
    """Topic names, group names, prefixes, wildcards and kafka-cluster are accepted."""
    assert validate_name(kind, name, pattern) == name
    assert ResourcePattern(kind, name, pattern).name == name


@pytest.mark.parametrize("kind, name, pattern", [
    (TOPIC, "bad/name", LITERAL), (TOPIC, "a" * 250, LITERAL), (TOPIC, "", LITERAL), (TOPIC, "*", PREFIXED),
    (TOPIC, ".", PREFIXED), (GROUP, "a/b", LITERAL), (GROUP, "tab\there", LITERAL), (GROUP, "g" * 256, LITERAL),
    (GROUP, "..", LITERAL), (CLUSTER, "other", LITERAL), (CLUSTER, CLUSTER_NAME, PREFIXED)])
def test_illegal_names(kind: ResourceType, name: str, pattern: PatternType) -> None:
    """Names a broker could never check, or ZooKeeper never store, are refused."""
    with pytest.raises(ValueError):
        ResourcePattern(kind, name, pattern)


def test_patterns_are_literal_or_prefixed_only() -> None:
    """ANY and MATCH belong to filters."""
    with pytest.raises(ValueError, match="for filters"):
        ResourcePattern(TOPIC, "t", MATCH)


def test_the_literal_star_is_the_wildcard() -> None:
    """Only a LITERAL * means every resource of the type."""
    assert ResourcePattern(TOPIC, "*").is_wildcard
    assert not ResourcePattern(TOPIC, "t").is_wildcard


def test_operations_that_apply_to_each_resource() -> None:
    """Write applies to topics, not groups; ClusterAction only to the cluster; Alter and Create to rill's groups."""
    assert check_operation(TOPIC, Operation.WRITE) is Operation.WRITE
    assert check_operation(GROUP, Operation.ALTER) is Operation.ALTER
    assert check_operation(CLUSTER, Operation.CLUSTER_ACTION) is Operation.CLUSTER_ACTION
    with pytest.raises(ValueError, match="Write does not apply to a Group"):
        check_operation(GROUP, Operation.WRITE)
    with pytest.raises(ValueError):
        check_operation(TOPIC, Operation.CLUSTER_ACTION)


def test_text_forms_are_kafka_acls_output() -> None:
    """str() gives kafka-acls' ResourcePattern(...) and (principal=..., ...) lines."""
    assert str(ResourcePattern(TOPIC, "t")) == "ResourcePattern(resourceType=TOPIC, name=t, patternType=LITERAL)"
    assert str(entry(op=Operation.CLUSTER_ACTION)) == \
        "(principal=User:alice, host=*, operation=CLUSTER_ACTION, permissionType=ALLOW)"
    assert str(AclBindingFilter(pattern_type=MATCH)) == \
        "ResourcePattern(resourceType=ANY, name=<any>, patternType=MATCH)"


def test_entry_json_is_kafkas_zookeeper_form() -> None:
    """An entry's JSON has Kafka's four fields and spellings, and reads back."""
    e = entry(op=Operation.DESCRIBE_CONFIGS, permission=Permission.DENY, host="10.1.2.3")
    assert entry_to_json(e) == {"principal": "User:alice", "permissionType": "Deny", "operation": "DescribeConfigs",
                                "host": "10.1.2.3"}
    assert entry_from_json(entry_to_json(e)) == e


def test_binding_json_round_trips() -> None:
    """A binding's JSON adds the pattern's three fields."""
    b = AclBinding(ResourcePattern(GROUP, "bill", PREFIXED), entry())
    assert binding_to_json(b)["patternType"] == "PREFIXED"
    assert binding_from_json(binding_to_json(b)) == b


@pytest.mark.parametrize("obj", [[], {"principal": "User:a"}, {**entry_to_json(entry()), "operation": 3},
                                 {**entry_to_json(entry()), "host": "example.com"}])
def test_bad_json_is_a_value_error(obj: object) -> None:
    """Missing, mistyped or invalid fields raise ValueError."""
    with pytest.raises(ValueError):
        entry_from_json(obj)


@pytest.mark.parametrize("pattern, matched", [
    (ResourcePattern(TOPIC, "orders"), True), (ResourcePattern(TOPIC, "*"), True),
    (ResourcePattern(TOPIC, "ord", PREFIXED), True), (ResourcePattern(TOPIC, "orders", PREFIXED), True),
    (ResourcePattern(TOPIC, "orders-eu", PREFIXED), False), (ResourcePattern(TOPIC, "other"), False),
    (ResourcePattern(GROUP, "orders"), False)])
def test_match_filter_finds_every_pattern_applying_to_a_name(pattern: ResourcePattern, matched: bool) -> None:
    """MATCH: the literal name, the wildcard and each prefix of the name, of the filter's type only."""
    assert AclBindingFilter(TOPIC, "orders", MATCH).matches_pattern(pattern) is matched


@pytest.mark.parametrize("pattern_type, pattern, matched", [
    (ANY, ResourcePattern(TOPIC, "ord", PREFIXED), True), (ANY, ResourcePattern(TOPIC, "ord"), True),
    (ANY, ResourcePattern(TOPIC, "*"), False), (LITERAL, ResourcePattern(TOPIC, "ord", PREFIXED), False),
    (PREFIXED, ResourcePattern(TOPIC, "ord", PREFIXED), True)])
def test_any_and_specific_filters_match_the_exact_name(pattern_type: PatternType, pattern: ResourcePattern,
                                                       matched: bool) -> None:
    """ANY matches the exact name of any pattern type; LITERAL and PREFIXED only their own type."""
    assert AclBindingFilter(TOPIC, "ord", pattern_type).matches_pattern(pattern) is matched


def test_entry_filter_fields_left_out_match_anything() -> None:
    """None matches any value; a given operation (ALL too) matches only itself."""
    e = entry(op=Operation.READ)
    assert AclBindingFilter().matches_entry(e)
    assert AclBindingFilter(principal="User:alice", permission=Permission.ALLOW, host="*").matches_entry(e)
    assert not AclBindingFilter(operation=Operation.ALL).matches_entry(e)
    assert not AclBindingFilter(principal="User:bob").matches_entry(e)
    assert AclBindingFilter(TOPIC, "t").matches(AclBinding(ResourcePattern(TOPIC, "t"), e))


def test_by_pattern_groups_entries_in_order() -> None:
    """Listings group entries under their pattern, sorted."""
    t = ResourcePattern(TOPIC, "t")
    bindings = [AclBinding(t, entry("User:bob")), AclBinding(ResourcePattern(GROUP, "g"), entry()),
                AclBinding(t, entry("User:alice"))]
    grouped = by_pattern(bindings)
    assert list(grouped) == [ResourcePattern(GROUP, "g"), t]
    assert [e.principal for e in grouped[t]] == ["User:alice", "User:bob"]
