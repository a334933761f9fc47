"""URL parameter parsing: valid values pass, invalid ones fall back to the default with a notice."""

from headwatch.dashboard.urlstate import describe_options, encode, parse_many, parse_one, query_string


def test_parse_one_valid_int_and_string():
    assert parse_one("layer", ["3"], list(range(24)), 0).value == 3
    assert parse_one("layer", ["3"], list(range(24)), 0).notice is None
    assert parse_one("stat", ["kl_gauss"], ["std", "kl_gauss"], "std").value == "kl_gauss"
    assert parse_one("layer", [], list(range(24)), 5).value == 5  # absent: default, no notice
    assert parse_one("layer", ["1", "7"], list(range(24)), 0).value == 7  # the last one counts


def test_parse_one_invalid_falls_back_with_notice_quoting_the_value():
    for raw, options, default in (
        (["99"], list(range(24)), 0),
        (["x"], list(range(16)), 0),
        (["bogus"], ["std", "kl_gauss"], "std"),
        (["1.5"], list(range(4)), 0),
    ):
        got = parse_one("p", raw, options, default)
        assert got.value == default
        assert got.notice is not None and f"p={raw[0]}" in got.notice


def test_describe_options_names_the_allowed_range():
    assert describe_options(list(range(24))) == "0 to 23"
    assert describe_options([-1, 0, 1]) == "-1 to 1"  # never "-1-1"
    # the similarity page's layers: -1 is every head, and the notice says so
    layers = lambda v: "every head" if v == -1 else f"layer {v}"  # noqa: E731
    assert describe_options([-1, 0, 1, 2], fmt=layers) == "0 to 2, or -1 for every head"
    assert describe_options([0, 500, 1000], fmt=lambda s: f"{s:,}") == "0, 500, 1000"  # 1,000 shows 1000
    assert "std" in describe_options(["std", "kl_gauss"])
    assert "(30 in all)" in describe_options([f"s{i}" for i in range(30)])


def test_bools_accept_common_spellings():
    assert parse_one("logc", ["1"], [False, True], False).value is True
    assert parse_one("logc", ["true"], [False, True], False).value is True
    assert parse_one("logc", ["off"], [False, True], True).value is False
    assert parse_one("logc", ["maybe"], [False, True], False).notice


def test_parse_many_keeps_valid_values_in_option_order():
    steps = [0, 1, 2, 4, 1000, 2000]
    got = parse_many("step", ["1000", "1", "7"], steps, [0])
    assert got.value == [1, 1000]
    assert "step=7" in got.notice
    assert parse_many("step", ["7", "x"], steps, [0, 2000]).value == [0, 2000]
    assert parse_many("step", [], steps, [0]).value == [0]
    assert parse_many("step", ["2", "2"], steps, [0]).value == [2]


def test_parse_many_says_which_values_a_link_repeats():
    got = parse_many("runs", ["b", "a", "b", " b", "a", "c"], ["a", "b", "c"], ["a"])
    assert got.value == ["a", "b", "c"]
    assert got.notice == "The link repeats `runs=b` (3 times), `runs=a` (2 times): each is shown once."
    assert parse_many("runs", ["a", "b"], ["a", "b"], ["a"]).notice is None
    bad = parse_many("runs", ["x", "a", "a"], ["a", "b"], ["b"]).notice or ""
    assert "`runs=x` not valid here" in bad and "repeats `runs=a` (2 times)" in bad  # both said


def test_parse_many_drops_a_value_left_out_for_its_reason_and_keeps_the_others():
    own = {"a": "is this page's own run"}
    got = parse_many("joint", ["a", "b"], ["b", "c"], [], left_out=own)
    assert got.value == ["b"] and got.notice == "`joint=a` is this page's own run."
    alone = parse_many("joint", ["a", "a"], ["b", "c"], [], left_out=own)
    assert alone.value == [] and alone.notice == "`joint=a` is this page's own run."  # said once, no "default"
    mixed = parse_many("joint", ["a", "zz"], ["b", "c"], [], left_out=own).notice or ""
    assert "`joint=zz` not valid here" in mixed and "`joint=a` is this page's own run." in mixed and "joint=a`," not in mixed


def test_query_string_repeats_lists_and_quotes():
    assert query_string({"layer": 3, "step": [0, 64], "logc": True}) == "layer=3&step=0&step=64&logc=1"
    assert query_string({"run": "a b/c"}) == "run=a%20b%2Fc"
    assert encode(False) == "0" and encode(0.1) == "0.1"


def test_a_step_past_the_last_checkpoint_says_the_run_has_not_reached_it():
    steps = [0, 1, 2, 4, 1000]
    got = parse_one("step", ["5000"], steps, 1000)
    assert got.value == 1000
    assert got.notice is not None and "not in this run yet" in got.notice and "last checkpoint is step 1,000" in got.notice
    # a step between checkpoints, or another parameter, is the plain "not valid" notice
    assert "not valid here" in (parse_one("step", ["3"], steps, 1000).notice or "")
    assert "not valid here" in (parse_one("layer", ["5000"], steps, 1000).notice or "")
    many = parse_many("step", ["0", "5000", "6000"], steps, [1000])
    assert many.value == [0]
    assert many.notice is not None and "not in this run yet" in many.notice
    assert "not valid here" in (parse_many("step", ["3", "5000"], steps, [1000]).notice or "")
