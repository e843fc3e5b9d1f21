#include "torus/common/label_selector.h"

#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "torus/common/well_known_labels.h"

namespace torus {

// Readable failures: `in(a,b)` rather than the bytes of the struct.
void PrintTo(const LabelExpression& e, std::ostream* os) {
  static constexpr const char* kOps[] = {"==", "!=", "in", "!in", "exists", "!exists"};
  *os << kOps[static_cast<int>(e.op)] << "(" << absl::StrJoin(e.values, ",") << ")";
}

namespace label_selector_test {

using Op = LabelExpression::Op;

const std::string kValueRule =
    "a value is empty, or 1-63 characters: letters, digits, '-', '_' or '.', beginning and ending with a letter or "
    "digit";
const std::string kExpected = "a value, in(...) or exists()";

// Debian's Abseil gives messages as its own string_view, which GoogleTest prints byte by byte.
std::string Message(const absl::Status& status) { return std::string(status.message()); }

LabelExpression Eq(const std::string& v) { return {Op::kEquals, {v}}; }
LabelExpression Ne(const std::string& v) { return {Op::kNotEquals, {v}}; }
LabelExpression In(std::vector<std::string> v) { return {Op::kIn, std::move(v)}; }
LabelExpression NotIn(std::vector<std::string> v) { return {Op::kNotIn, std::move(v)}; }
LabelExpression Exists() { return {Op::kExists, {}}; }
LabelExpression NotExists() { return {Op::kNotExists, {}}; }

// The error for selector text of key "team".
std::string TeamError(int position, const std::string& what) {
  return "label selector for \"team\": position " + std::to_string(position) + ": " + what;
}

struct ValidCase {
  std::string text;
  std::vector<LabelExpression> expressions;
};

const std::vector<ValidCase>& ValidCases() {
  static const auto* cases = new std::vector<ValidCase>{
      {"spot", {Eq("spot")}},
      {"  spot\t", {Eq("spot")}},
      {"A", {Eq("A")}},
      {"a.b_c-1", {Eq("a.b_c-1")}},
      {std::string(63, 'v'), {Eq(std::string(63, 'v'))}},
      {"!spot", {Ne("spot")}},
      {"! spot", {Ne("spot")}},
      {"\t!\t spot ", {Ne("spot")}},
      {"in(a,b)", {In({"a", "b"})}},
      {"in( a ,\tb )", {In({"a", "b"})}},
      {"in(b,a,b)", {In({"a", "b"})}},  // a set: sorted, duplicates dropped
      {"in(a)", {In({"a"})}},
      {"!in(a,b)", {NotIn({"a", "b"})}},
      {" ! in(a , b) ", {NotIn({"a", "b"})}},
      {"exists()", {Exists()}},
      {"!exists()", {NotExists()}},
      {" ! exists() ", {NotExists()}},
      {"exists", {Eq("exists")}},  // plain values that happen to be keywords
      {"in", {Eq("in")}},
      {"!in", {Ne("in")}},
      {"!exists", {Ne("exists")}},
      {"inx", {Eq("inx")}},
      {"!a,!b", {Ne("a"), Ne("b")}},
      {"!b , !a", {Ne("a"), Ne("b")}},  // sorted
      {"!a,!a", {Ne("a")}},
      {"a,!b", {Eq("a"), Ne("b")}},
      {"!b,a", {Eq("a"), Ne("b")}},
      {"in(a,b),!in(c)", {In({"a", "b"}), NotIn({"c"})}},
      {"exists(),!v", {Ne("v"), Exists()}},
      {"exists(),!exists()", {Exists(), NotExists()}},  // never holds, but not a parse error
      {"a,exists()", {Eq("a"), Exists()}},
  };
  return *cases;
}

TEST(LabelSelectorParseTest, Valid) {
  for (const ValidCase& c : ValidCases()) {
    absl::StatusOr<LabelSelector> selector = LabelSelector::Parse({{"team", c.text}});
    ASSERT_TRUE(selector.ok()) << "text: " << c.text << ": " << selector.status();
    ASSERT_EQ(selector->expressions().size(), 1u) << c.text;
    EXPECT_EQ(selector->expressions().begin()->first, "team");
    EXPECT_EQ(selector->expressions().begin()->second, c.expressions) << "text: " << c.text;
    EXPECT_FALSE(selector->empty());
  }
}

struct InvalidCase {
  std::string text;
  std::string error;
};

TEST(LabelSelectorParseTest, InvalidTextNamesKeyAndPosition) {
  const std::string empty_expression = "empty expression; expected " + kExpected;
  const std::string after_bang = "expected " + kExpected + " after '!'";
  const std::string unbalanced_open = "unbalanced '('; expected ')'";
  const std::string second_positive =
      "more than one positive expression (a value or in(...)) on one key; write one in(...)";
  const std::string only_in_exists = "unexpected '('; only in(...) and exists() take parentheses";
  auto bad_value = [](const std::string& quoted, const std::string& problem) {
    return "label value \"" + quoted + "\" of key \"team\" is invalid: " + problem + "; " + kValueRule;
  };
  const std::vector<InvalidCase> cases = {
      // Empty expressions.
      {"", TeamError(0, empty_expression)},
      {"   ", TeamError(3, empty_expression)},
      {",a", TeamError(0, empty_expression)},
      {"a,", TeamError(2, empty_expression)},
      {"a,,b", TeamError(2, empty_expression)},
      {"a, ,b", TeamError(3, empty_expression)},
      {"!", TeamError(1, after_bang)},
      {"! ,a", TeamError(2, after_bang)},
      // Doubled negation.
      {"!!v", TeamError(1, "a second '!'; " + after_bang)},
      {"! !v", TeamError(2, "a second '!'; " + after_bang)},
      // in(...) lists.
      {"in()", TeamError(3, "empty in(); expected at least one value")},
      {"in( )", TeamError(4, "empty in(); expected at least one value")},
      {"!in()", TeamError(4, "empty in(); expected at least one value")},
      {"in(a,,b)", TeamError(5, "empty value in in(...)")},
      {"in(,a)", TeamError(3, "empty value in in(...)")},
      {"in(a,)", TeamError(5, "empty value in in(...)")},
      {"in(a, )", TeamError(6, "empty value in in(...)")},
      {"in(a b)", TeamError(5, "unexpected 'b' in in(...); expected ',' or ')'")},
      {"in((a))", TeamError(3, "unexpected '(' in in(...); expected a value")},
      {"in(a(b))", TeamError(4, "unexpected '(' in in(...); expected ',' or ')'")},
      // Unbalanced parentheses.
      {"in(a,b", TeamError(2, unbalanced_open)},
      {"in(", TeamError(2, unbalanced_open)},
      {"in(a ", TeamError(2, unbalanced_open)},
      {"!in(a,b,c", TeamError(3, unbalanced_open)},
      {"exists(", TeamError(6, unbalanced_open)},
      {"a)", TeamError(1, "unbalanced ')'")},
      {")", TeamError(0, "unbalanced ')'")},
      {"in(a))", TeamError(5, "unbalanced ')'")},
      {"in(a),!b)", TeamError(8, "unbalanced ')'")},
      // Lists without in.
      {"(a,b)", TeamError(0, "'(' without in; write in(...) for a set of values")},
      {"!(a,b)", TeamError(1, "'(' without in; write in(...) for a set of values")},
      {"foo(a)", TeamError(3, only_in_exists)},
      {"IN(a)", TeamError(2, only_in_exists)},
      {"in(a)(b)", TeamError(5, only_in_exists)},
      // Spaces where the grammar allows none.
      {"in (a)", TeamError(2, "unexpected space; write in(...) with no space before '('")},
      {"exists ()", TeamError(6, "unexpected space; write exists() with no space before '('")},
      {"exists( )", TeamError(7, "exists() takes no values; expected ')'")},
      {"exists(a)", TeamError(7, "exists() takes no values; expected ')'")},
      {"a b", TeamError(2, "unexpected 'b'; expected ',' or the end of the selector")},
      {"in(a)b", TeamError(5, "unexpected 'b'; expected ',' or the end of the selector")},
      {"exists()x", TeamError(8, "unexpected 'x'; expected ',' or the end of the selector")},
      // More than one positive expression.
      {"a,b", TeamError(2, second_positive)},
      {"a,a", TeamError(2, second_positive)},
      {"in(a,b),c", TeamError(8, second_positive)},
      {"!x, a, in(b)", TeamError(7, second_positive)},
      // Invalid values, at the value's position.
      {"a=b", TeamError(0, bad_value("a=b", "the value contains '='"))},
      {"!-a", TeamError(1, bad_value("-a", "the value begins with '-'"))},
      {"in(a,b-)", TeamError(5, bad_value("b-", "the value ends with '-'"))},
      {"a\nb", TeamError(0, bad_value("a\\nb", "the value contains '\\n'"))},
      {"caf\xc3\xa9", TeamError(0, bad_value("caf\\xc3\\xa9", "the value contains '\\xc3'"))},
      {"\"a\"", TeamError(0, bad_value("\\\"a\\\"", "the value contains '\\\"'"))},
      {std::string(64, 'v'), TeamError(0, bad_value(std::string(64, 'v'), "the value is 64 characters long"))},
  };
  for (const InvalidCase& c : cases) {
    absl::StatusOr<LabelSelector> selector = LabelSelector::Parse({{"team", c.text}});
    ASSERT_FALSE(selector.ok()) << "text: " << c.text;
    EXPECT_EQ(selector.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_EQ(Message(selector.status()), c.error) << "text: " << c.text;
  }
}

TEST(LabelSelectorParseTest, InvalidKeys) {
  const std::string well_known =
      "node-id, accelerator-type, tpu-slice-name, tpu-worker-id, tpu-topology, tpu-pod-type, market-type, "
      "node-group, availability-zone, availability-region";
  const std::vector<std::pair<std::map<std::string, std::string>, std::string>> cases = {
      {{{"ray.io/foo", "a"}},
       "label selector: label key \"ray.io/foo\" is not supported: ray.io/ keys are read as torus.io/ keys only "
       "for " +
           well_known},
      {{{"", "a"}},
       "label selector: label key \"\" is invalid: the key is empty; a key is an optional prefix and '/' followed "
       "by a name"},
      {{{"a..b/x", "a"}},
       "label selector: label key \"a..b/x\" is invalid: prefix segment 2 is empty; a prefix is dot-separated DNS "
       "labels of 1-63 letters, digits or '-', each beginning and ending with a letter or digit, at most 253 "
       "characters in all"},
      {{{"ray.io/market-type", "spot"}, {"torus.io/market-type", "spot"}},
       "label selector: keys \"ray.io/market-type\" and \"torus.io/market-type\" both select "
       "torus.io/market-type; write one"},
      // Text errors name the key as written.
      {{{"ray.io/market-type", "spot,on-demand"}},
       "label selector for \"ray.io/market-type\": position 5: more than one positive expression (a value or "
       "in(...)) on one key; write one in(...)"},
      // A valid key does not excuse the next one.
      {{{"team", "a"}, {"zone", "in()"}}, "label selector for \"zone\": position 3: empty in(); expected at least one value"},
  };
  for (const auto& [selector_map, error] : cases) {
    absl::StatusOr<LabelSelector> selector = LabelSelector::Parse(selector_map);
    ASSERT_FALSE(selector.ok()) << error;
    EXPECT_EQ(selector.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(Message(selector.status()), error);
  }
}

TEST(LabelSelectorParseTest, RayAliasesReadAsTorusKeys) {
  for (std::string_view name : kWellKnownLabelNames) {
    const std::string ray_key = "ray.io/" + std::string(name);
    const std::string torus_key = "torus.io/" + std::string(name);
    absl::StatusOr<LabelSelector> selector = LabelSelector::Parse({{ray_key, "v1"}});
    ASSERT_TRUE(selector.ok()) << ray_key << ": " << selector.status();
    ASSERT_EQ(selector->expressions().count(torus_key), 1u) << ray_key;
    EXPECT_EQ(selector->expressions().count(ray_key), 0u) << ray_key;
    EXPECT_TRUE(selector->Matches({{torus_key, "v1"}})) << ray_key;
    EXPECT_FALSE(selector->Matches({{ray_key, "v1"}})) << ray_key;  // node labels are canonical
    EXPECT_EQ(selector->ToString(), "{\"" + torus_key + "\": \"v1\"}");
  }
  // Other keys, torus.io/ ones included, are taken as written.
  absl::StatusOr<LabelSelector> selector =
      LabelSelector::Parse({{"torus.io/tpu-chips-per-host", "4"}, {"example.com/team", "ml"}});
  ASSERT_TRUE(selector.ok()) << selector.status();
  EXPECT_EQ(selector->ToString(), "{\"example.com/team\": \"ml\", \"torus.io/tpu-chips-per-host\": \"4\"}");
}

// How one key's text matches nodes where the key is absent, empty, "a", "b" or "c".
struct MatchCase {
  std::string text;
  std::vector<bool> matches;  // absent, "", "a", "b", "c"
};

TEST(LabelSelectorMatchTest, Table) {
  const std::vector<Labels> nodes = {
      {{"other", "a"}}, {{"team", ""}}, {{"team", "a"}}, {{"team", "b"}}, {{"team", "c"}, {"other", "x"}}};
  const std::vector<MatchCase> cases = {
      {"a", {false, false, true, false, false}},
      {"in(a)", {false, false, true, false, false}},
      {"!a", {true, true, false, true, true}},
      {"in(a,b)", {false, false, true, true, false}},
      {"!in(a,b)", {true, true, false, false, true}},
      {"!in(c)", {true, true, true, true, false}},
      {"exists()", {false, true, true, true, true}},
      {"!exists()", {true, false, false, false, false}},
      {"!a,!b", {true, true, false, false, true}},
      {"exists(),!a", {false, true, false, true, true}},
      {"in(a,b),!b", {false, false, true, false, false}},
      {"a,!a", {false, false, false, false, false}},
      {"exists(),!exists()", {false, false, false, false, false}},
  };
  for (const MatchCase& c : cases) {
    absl::StatusOr<LabelSelector> selector = LabelSelector::Parse({{"team", c.text}});
    ASSERT_TRUE(selector.ok()) << c.text << ": " << selector.status();
    ASSERT_EQ(c.matches.size(), nodes.size());
    for (size_t i = 0; i < nodes.size(); ++i) {
      EXPECT_EQ(selector->Matches(nodes[i]), c.matches[i]) << "text: " << c.text << ", node " << i;
    }
  }
}

TEST(LabelSelectorMatchTest, KeysAreAnded) {
  absl::StatusOr<LabelSelector> selector =
      LabelSelector::Parse({{"team", "in(ml,infra)"}, {"ray.io/market-type", "!spot"}});
  ASSERT_TRUE(selector.ok()) << selector.status();
  EXPECT_TRUE(selector->Matches({{"team", "ml"}}));
  EXPECT_TRUE(selector->Matches({{"team", "ml"}, {"torus.io/market-type", "on-demand"}}));
  EXPECT_FALSE(selector->Matches({{"team", "ml"}, {"torus.io/market-type", "spot"}}));
  EXPECT_FALSE(selector->Matches({{"team", "web"}, {"torus.io/market-type", "on-demand"}}));
  EXPECT_FALSE(selector->Matches({{"torus.io/market-type", "on-demand"}}));
  EXPECT_FALSE(selector->Matches({}));
}

TEST(LabelSelectorMatchTest, EmptySelectorMatchesEveryNode) {
  LabelSelector selector;
  EXPECT_TRUE(selector.empty());
  EXPECT_TRUE(selector.Matches({}));
  EXPECT_TRUE(selector.Matches({{"team", "a"}}));
  absl::StatusOr<LabelSelector> parsed = LabelSelector::Parse({});
  ASSERT_TRUE(parsed.ok());
  EXPECT_TRUE(parsed->empty());
  EXPECT_EQ(*parsed, selector);
  EXPECT_EQ(selector.ToString(), "{}");
}

TEST(LabelSelectorTest, AllowedValues) {
  absl::StatusOr<LabelSelector> selector =
      LabelSelector::Parse({{"team", "in(b,a),!c"}, {"zone", "z1"}, {"tier", "!gold,exists()"}});
  ASSERT_TRUE(selector.ok()) << selector.status();
  ASSERT_NE(selector->AllowedValues("team"), nullptr);
  EXPECT_EQ(*selector->AllowedValues("team"), (std::vector<std::string>{"a", "b"}));
  ASSERT_NE(selector->AllowedValues("zone"), nullptr);
  EXPECT_EQ(*selector->AllowedValues("zone"), (std::vector<std::string>{"z1"}));
  EXPECT_EQ(selector->AllowedValues("tier"), nullptr);
  EXPECT_EQ(selector->AllowedValues("absent"), nullptr);
}

TEST(LabelSelectorToStringTest, CanonicalText) {
  absl::StatusOr<LabelSelector> selector = LabelSelector::Parse(
      {{"team", " exists() , ! in( b , a ) "}, {"ray.io/market-type", "spot"}, {"zone", "!z2,!z1"}});
  ASSERT_TRUE(selector.ok()) << selector.status();
  EXPECT_EQ(selector->ToString(),
            "{\"team\": \"!in(a,b),exists()\", \"torus.io/market-type\": \"spot\", \"zone\": \"!z1,!z2\"}");
}

TEST(LabelSelectorToStringTest, RoundTrip) {
  std::vector<std::map<std::string, std::string>> selectors = {
      {},
      {{"team", "a"}, {"ray.io/accelerator-type", "in(TPU-V6E,TPU-V5P)"}, {"example.com/x", "!exists()"}},
      {{"a", "!a,!b,exists()"}, {"b", "!in(x,y,z),in(w)"}},
  };
  for (const ValidCase& c : ValidCases()) selectors.push_back({{"team", c.text}});
  for (const auto& selector_map : selectors) {
    absl::StatusOr<LabelSelector> selector = LabelSelector::Parse(selector_map);
    ASSERT_TRUE(selector.ok()) << selector.status();
    const std::string text = selector->ToString();
    absl::StatusOr<LabelSelector> reparsed = LabelSelector::ParseJson(text);
    ASSERT_TRUE(reparsed.ok()) << text << ": " << reparsed.status();
    EXPECT_EQ(*reparsed, *selector) << text;
    EXPECT_EQ(reparsed->ToString(), text);
  }
}

TEST(LabelSelectorParseJsonTest, Valid) {
  absl::StatusOr<LabelSelector> selector =
      LabelSelector::ParseJson(" {\"team\": \"!in(a,b)\",\n \"ray.io/market-type\": \"spot\"} ");
  ASSERT_TRUE(selector.ok()) << selector.status();
  LabelSelector::Expressions expected = {{"team", {NotIn({"a", "b"})}}, {"torus.io/market-type", {Eq("spot")}}};
  EXPECT_EQ(selector->expressions(), expected);

  absl::StatusOr<LabelSelector> empty = LabelSelector::ParseJson("{}");
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE(empty->empty());
}

TEST(LabelSelectorParseJsonTest, Errors) {
  const std::string not_object = "label selector: expected a JSON object of label keys to selector strings, got ";
  const std::vector<InvalidCase> cases = {
      {"[]", not_object + "array"},
      {"\"team\"", not_object + "string"},
      {"null", not_object + "null"},
      {"1", not_object + "number"},
      {"{\"team\": 1}", "label selector for \"team\": expected a string, got number"},
      {"{\"team\": true}", "label selector for \"team\": expected a string, got boolean"},
      {"{\"team\": null}", "label selector for \"team\": expected a string, got null"},
      {"{\"team\": [\"a\"]}", "label selector for \"team\": expected a string, got array"},
      // Duplicates count only among the selector's own keys.
      {"{\"team\": {\"a\": 1, \"a\": 2}}", "label selector for \"team\": expected a string, got object"},
      {"{\"team\": \"a\", \"team\": \"b\"}", "label selector: duplicate key \"team\""},
      {"{\"team\": \"a,b\"}",
       "label selector for \"team\": position 2: more than one positive expression (a value or in(...)) on one "
       "key; write one in(...)"},
      {"{\"ray.io/foo\": \"a\"}",
       "label selector: label key \"ray.io/foo\" is not supported: ray.io/ keys are read as torus.io/ keys only for "
       "node-id, accelerator-type, tpu-slice-name, tpu-worker-id, tpu-topology, tpu-pod-type, market-type, "
       "node-group, availability-zone, availability-region"},
      {"",
       "label selector: invalid JSON: parse error at line 1, column 1: syntax error while parsing value - "
       "unexpected end of input; expected '[', '{', or a literal"},
      {"{\"team\": \"a\"",
       "label selector: invalid JSON: parse error at line 1, column 13: syntax error while parsing object - "
       "unexpected end of input; expected '}'"},
      {"{\"team\": \"a\"} x",
       "label selector: invalid JSON: parse error at line 1, column 15: syntax error while parsing value - "
       "invalid literal; last read: '\"a\"} x'; expected end of input"},
  };
  for (const InvalidCase& c : cases) {
    absl::StatusOr<LabelSelector> selector = LabelSelector::ParseJson(c.text);
    ASSERT_FALSE(selector.ok()) << "json: " << c.text;
    EXPECT_EQ(selector.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_EQ(Message(selector.status()), c.error) << "json: " << c.text;
  }
}

TEST(LabelSelectorParseJsonTest, DeepNestingIsAnErrorNotACrash) {
  absl::StatusOr<LabelSelector> selector =
      LabelSelector::ParseJson("{\"team\": " + std::string(100000, '[') + std::string(100000, ']') + "}");
  ASSERT_FALSE(selector.ok());
  EXPECT_EQ(Message(selector.status()), "label selector for \"team\": expected a string, got array");
}

}  // namespace label_selector_test
}  // namespace torus
