#include "torus/common/labels.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "torus/common/well_known_labels.h"

namespace torus {
namespace labels_test {

const std::string kKeyRule = "a key is an optional prefix and '/' followed by a name";
const std::string kNameRule =
    "a name is 1-63 characters: letters, digits, '-', '_' or '.', beginning and ending with a letter or digit";
const std::string kPrefixRule =
    "a prefix is dot-separated DNS labels of 1-63 letters, digits or '-', each beginning and ending with a letter "
    "or digit, at most 253 characters in all";
const std::string kValueRule =
    "a value is empty, or 1-63 characters: letters, digits, '-', '_' or '.', beginning and ending with a letter or "
    "digit";
const std::string kSettable =
    "torus.io/market-type, torus.io/node-group, torus.io/availability-zone, torus.io/availability-region";

// Debian's Abseil gives messages as its own string_view, which GoogleTest prints byte by byte.
std::string Message(const absl::Status& status) { return std::string(status.message()); }

const std::string k63 = std::string(62, 'a') + "z";
const std::string k64 = std::string(63, 'a') + "z";
// 63 + 63 + 63 + 61 characters and three dots: 253 in all.
const std::string kPrefix253 =
    std::string(63, 'a') + "." + std::string(63, 'b') + "." + std::string(63, 'c') + "." + std::string(61, 'd');
const std::string kPrefix254 = kPrefix253 + "d";

struct KeyCase {
  std::string key;
  std::string error;  // empty when valid
};

TEST(ValidateLabelKeyTest, Table) {
  auto invalid = [](const std::string& key, const std::string& problem, const std::string& rule) {
    return "label key \"" + key + "\" is invalid: " + problem + "; " + rule;
  };
  const std::vector<KeyCase> cases = {
      {"a", ""},
      {"A", ""},
      {"9", ""},
      {"env", ""},
      {"my_app-1.v2", ""},
      {"Team.Name", ""},
      {k63, ""},
      {"example.com/name", ""},
      {"Example.COM/x", ""},  // upper-case prefix, as Ray accepts
      {"a-b.c1/x", ""},
      {"9/x", ""},
      {"torus.io/node-id", ""},
      {"ray.io/anything", ""},  // a valid key; CanonicalLabelKey decides about ray.io/
      {kPrefix253 + "/" + k63, ""},
      {"", invalid("", "the key is empty", kKeyRule)},
      {k64, invalid(k64, "the name is 64 characters long", kNameRule)},
      {"-a", invalid("-a", "the name begins with '-'", kNameRule)},
      {"a-", invalid("a-", "the name ends with '-'", kNameRule)},
      {"_a", invalid("_a", "the name begins with '_'", kNameRule)},
      {"a.", invalid("a.", "the name ends with '.'", kNameRule)},
      {"a b", invalid("a b", "the name contains ' '", kNameRule)},
      {"a=b", invalid("a=b", "the name contains '='", kNameRule)},
      {"a:b", invalid("a:b", "the name contains ':'", kNameRule)},
      {"caf\xc3\xa9", invalid("caf\\xc3\\xa9", "the name contains '\\xc3'", kNameRule)},
      {"a/b/c", invalid("a/b/c", "it contains more than one '/'", kKeyRule)},
      {"/x", invalid("/x", "the prefix before '/' is empty", kPrefixRule)},
      {"x/", invalid("x/", "the name is empty", kNameRule)},
      {"example.com/-x", invalid("example.com/-x", "the name begins with '-'", kNameRule)},
      {"example.com/" + k64, invalid("example.com/" + k64, "the name is 64 characters long", kNameRule)},
      {"a..b/x", invalid("a..b/x", "prefix segment 2 is empty", kPrefixRule)},
      {".a/x", invalid(".a/x", "prefix segment 1 is empty", kPrefixRule)},
      {"a./x", invalid("a./x", "prefix segment 2 is empty", kPrefixRule)},
      {"a_b.com/x", invalid("a_b.com/x", "prefix segment 1 contains '_'", kPrefixRule)},
      {"a.b c/x", invalid("a.b c/x", "prefix segment 2 contains ' '", kPrefixRule)},
      {"-a.com/x", invalid("-a.com/x", "prefix segment 1 begins with '-'", kPrefixRule)},
      {"a.com-/x", invalid("a.com-/x", "prefix segment 2 ends with '-'", kPrefixRule)},
      {k64 + ".com/x", invalid(k64 + ".com/x", "prefix segment 1 is 64 characters long", kPrefixRule)},
      {kPrefix254 + "/x", invalid(kPrefix254 + "/x", "the prefix is 254 characters long", kPrefixRule)},
  };
  for (const KeyCase& c : cases) {
    absl::Status status = ValidateLabelKey(c.key);
    if (c.error.empty()) {
      EXPECT_TRUE(status.ok()) << c.key << ": " << status;
    } else {
      EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.key;
      EXPECT_EQ(Message(status), c.error);
    }
  }
}

struct ValueCase {
  std::string value;
  std::string problem;  // empty when valid
};

TEST(ValidateLabelValueTest, Table) {
  const std::vector<ValueCase> cases = {
      {"", ""},
      {"v", ""},
      {"1.0", ""},
      {"a_b-c.D9", ""},
      {"TPU-V6E", ""},
      {k63, ""},
      {k64, "the value is 64 characters long"},
      {"-v", "the value begins with '-'"},
      {"v.", "the value ends with '.'"},
      {"a b", "the value contains ' '"},
      {"a/b", "the value contains '/'"},
      {"a=b", "the value contains '='"},
      {"a,b", "the value contains ','"},
      {"\t", "the value contains '\\t'"},
  };
  for (const ValueCase& c : cases) {
    absl::Status status = ValidateLabelValue("k", c.value);
    if (c.problem.empty()) {
      EXPECT_TRUE(status.ok()) << c.value << ": " << status;
    } else {
      EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.value;
      std::string quoted = c.value == "\t" ? "\\t" : c.value;
      EXPECT_EQ(Message(status),
                "label value \"" + quoted + "\" of key \"k\" is invalid: " + c.problem + "; " + kValueRule);
    }
  }
}

TEST(CanonicalLabelKeyTest, AliasesTheTenWellKnownNames) {
  for (std::string_view name : kWellKnownLabelNames) {
    absl::StatusOr<std::string> key = CanonicalLabelKey("ray.io/" + std::string(name));
    ASSERT_TRUE(key.ok()) << name << ": " << key.status();
    EXPECT_EQ(*key, "torus.io/" + std::string(name));
  }
}

struct CanonicalCase {
  std::string key;
  std::string canonical;  // empty when an error is expected
  std::string error;
};

TEST(CanonicalLabelKeyTest, Table) {
  const std::vector<CanonicalCase> cases = {
      {"ray.io/market-type", "torus.io/market-type", ""},
      {"torus.io/market-type", "torus.io/market-type", ""},
      {"torus.io/anything", "torus.io/anything", ""},  // reservation is CanonicalUserLabels' concern
      {"example.com/x", "example.com/x", ""},
      {"env", "env", ""},
      {"RAY.IO/market-type", "RAY.IO/market-type", ""},  // keys are case-sensitive: not the ray.io prefix
      {"ray.io.example/market-type", "ray.io.example/market-type", ""},
      {"ray.io/tpu-chips-per-host", "",
       "label key \"ray.io/tpu-chips-per-host\" is not supported: ray.io/ keys are read as torus.io/ keys only for "
       "node-id, accelerator-type, tpu-slice-name, tpu-worker-id, tpu-topology, tpu-pod-type, market-type, "
       "node-group, availability-zone, availability-region"},
      {"ray.io/Market-Type", "",
       "label key \"ray.io/Market-Type\" is not supported: ray.io/ keys are read as torus.io/ keys only for "
       "node-id, accelerator-type, tpu-slice-name, tpu-worker-id, tpu-topology, tpu-pod-type, market-type, "
       "node-group, availability-zone, availability-region"},
      {"ray.io/-x", "", "label key \"ray.io/-x\" is invalid: the name begins with '-'; " + kNameRule},
  };
  for (const CanonicalCase& c : cases) {
    absl::StatusOr<std::string> key = CanonicalLabelKey(c.key);
    if (c.error.empty()) {
      ASSERT_TRUE(key.ok()) << c.key << ": " << key.status();
      EXPECT_EQ(*key, c.canonical);
    } else {
      ASSERT_FALSE(key.ok()) << c.key;
      EXPECT_EQ(key.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_EQ(Message(key.status()), c.error);
    }
  }
}

struct UserLabelsCase {
  std::string name;
  Labels input;
  Labels want;
  std::string error;  // empty when valid
};

TEST(CanonicalUserLabelsTest, Table) {
  const std::vector<UserLabelsCase> cases = {
      {"empty", {}, {}, ""},
      {"plain", {{"env", "prod"}, {"example.com/team", ""}}, {{"env", "prod"}, {"example.com/team", ""}}, ""},
      {"the four settable keys",
       {{"torus.io/market-type", "spot"},
        {"torus.io/node-group", "g1"},
        {"torus.io/availability-zone", "us-east5-b"},
        {"torus.io/availability-region", "us-east5"}},
       {{"torus.io/market-type", "spot"},
        {"torus.io/node-group", "g1"},
        {"torus.io/availability-zone", "us-east5-b"},
        {"torus.io/availability-region", "us-east5"}},
       ""},
      {"ray.io aliases",
       {{"ray.io/market-type", "spot"}, {"ray.io/node-group", "g1"}},
       {{"torus.io/market-type", "spot"}, {"torus.io/node-group", "g1"}},
       ""},
      {"reserved",
       {{"torus.io/tpu-worker-id", "0"}},
       {},
       "label key \"torus.io/tpu-worker-id\" is reserved; users may set only " + kSettable},
      {"reserved internal key",
       {{"torus.io/tpu-chips-per-host", "4"}},
       {},
       "label key \"torus.io/tpu-chips-per-host\" is reserved; users may set only " + kSettable},
      {"reserved unknown key",
       {{"torus.io/owner", "me"}},
       {},
       "label key \"torus.io/owner\" is reserved; users may set only " + kSettable},
      {"reserved through the alias",
       {{"ray.io/node-id", "abc"}},
       {},
       "label key \"ray.io/node-id\" (read as torus.io/node-id) is reserved; users may set only " + kSettable},
      {"alias and canonical both",
       {{"ray.io/market-type", "spot"}, {"torus.io/market-type", "spot"}},
       {},
       "label keys \"ray.io/market-type\" and \"torus.io/market-type\" both set torus.io/market-type"},
      {"unknown ray.io key",
       {{"ray.io/foo", "x"}},
       {},
       "label key \"ray.io/foo\" is not supported: ray.io/ keys are read as torus.io/ keys only for node-id, "
       "accelerator-type, tpu-slice-name, tpu-worker-id, tpu-topology, tpu-pod-type, market-type, node-group, "
       "availability-zone, availability-region"},
      {"bad value",
       {{"env", "a b"}},
       {},
       "label value \"a b\" of key \"env\" is invalid: the value contains ' '; " + kValueRule},
      {"bad value of an alias quotes the user's key",
       {{"ray.io/market-type", "-spot"}},
       {},
       "label value \"-spot\" of key \"ray.io/market-type\" is invalid: the value begins with '-'; " + kValueRule},
  };
  for (const UserLabelsCase& c : cases) {
    absl::StatusOr<Labels> labels = CanonicalUserLabels(c.input);
    if (c.error.empty()) {
      ASSERT_TRUE(labels.ok()) << c.name << ": " << labels.status();
      EXPECT_EQ(*labels, c.want) << c.name;
    } else {
      ASSERT_FALSE(labels.ok()) << c.name;
      EXPECT_EQ(labels.status().code(), absl::StatusCode::kInvalidArgument) << c.name;
      EXPECT_EQ(Message(labels.status()), c.error) << c.name;
    }
  }
}

struct TextCase {
  std::string text;
  Labels want;
  std::string error;  // empty when valid
};

void ExpectParses(const std::vector<TextCase>& cases, absl::StatusOr<Labels> (*parse)(std::string_view)) {
  for (const TextCase& c : cases) {
    absl::StatusOr<Labels> labels = parse(c.text);
    if (c.error.empty()) {
      ASSERT_TRUE(labels.ok()) << c.text << ": " << labels.status();
      EXPECT_EQ(*labels, c.want) << c.text;
    } else {
      ASSERT_FALSE(labels.ok()) << c.text;
      EXPECT_EQ(labels.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
      EXPECT_EQ(Message(labels.status()), c.error) << c.text;
    }
  }
}

TEST(ParseLabelsFlagTest, Valid) {
  ExpectParses(
      {
          {"", {}, ""},
          {"   ", {}, ""},
          {"a=b", {{"a", "b"}}, ""},
          {"a=b,c=d", {{"a", "b"}, {"c", "d"}}, ""},
          {" a = b ,  c=d ", {{"a", "b"}, {"c", "d"}}, ""},
          {"k=", {{"k", ""}}, ""},
          {"example.com/team=ml,env=1.0", {{"example.com/team", "ml"}, {"env", "1.0"}}, ""},
          {"ray.io/market-type=spot", {{"torus.io/market-type", "spot"}}, ""},
          {"torus.io/node-group=g1,ray.io/availability-zone=us-east5-b",
           {{"torus.io/node-group", "g1"}, {"torus.io/availability-zone", "us-east5-b"}},
           ""},
      },
      ParseLabelsFlag);
}

TEST(ParseLabelsFlagTest, ErrorsNameTheItem) {
  ExpectParses(
      {
          {"foo", {}, "invalid --labels item \"foo\": expected key=value"},
          {"a=b, foo ", {}, "invalid --labels item \"foo\": expected key=value"},
          {"a=b,,c=d", {}, "invalid --labels: item 2 is empty; expected key=value,key2=value2"},
          {"a=b,", {}, "invalid --labels: item 2 is empty; expected key=value,key2=value2"},
          {",a=b", {}, "invalid --labels: item 1 is empty; expected key=value,key2=value2"},
          {"=v", {}, "invalid --labels item \"=v\": the key is empty; expected key=value"},
          {"a=1,a=2", {}, "invalid --labels item \"a=2\": duplicate key \"a\" (already set by \"a=1\")"},
          {"torus.io/market-type=spot,ray.io/market-type=spot",
           {},
           "invalid --labels item \"ray.io/market-type=spot\": duplicate key \"torus.io/market-type\" (already set "
           "by \"torus.io/market-type=spot\")"},
          {"torus.io/node-id=abc",
           {},
           "invalid --labels item \"torus.io/node-id=abc\": label key \"torus.io/node-id\" is reserved; users may "
           "set only " +
               kSettable},
          {"ray.io/foo=x",
           {},
           "invalid --labels item \"ray.io/foo=x\": label key \"ray.io/foo\" is not supported: ray.io/ keys are "
           "read as torus.io/ keys only for node-id, accelerator-type, tpu-slice-name, tpu-worker-id, tpu-topology, "
           "tpu-pod-type, market-type, node-group, availability-zone, availability-region"},
          {"a=b c",
           {},
           "invalid --labels item \"a=b c\": label value \"b c\" of key \"a\" is invalid: the value contains ' '; " +
               kValueRule},
          {"a=x=y",
           {},
           "invalid --labels item \"a=x=y\": label value \"x=y\" of key \"a\" is invalid: the value contains '='; " +
               kValueRule},
          {"bad key=v",
           {},
           "invalid --labels item \"bad key=v\": label key \"bad key\" is invalid: the name contains ' '; " +
               kNameRule},
          {"a..b/x=v",
           {},
           "invalid --labels item \"a..b/x=v\": label key \"a..b/x\" is invalid: prefix segment 2 is empty; " +
               kPrefixRule},
      },
      ParseLabelsFlag);
}

TEST(ParseLabelsFileTest, Valid) {
  ExpectParses(
      {
          {"", {}, ""},
          {"# only a comment\n", {}, ""},
          {"env: prod\nexample.com/team: ml\n", {{"env", "prod"}, {"example.com/team", "ml"}}, ""},
          {"ray.io/market-type: spot\ntorus.io/node-group: g1\n",
           {{"torus.io/market-type", "spot"}, {"torus.io/node-group", "g1"}},
           ""},
          // Numbers and booleans are taken as written, not as a re-printed number.
          {"version: 1.10\nenabled: true\ncount: 42\nmask: 0x1F\nflag: yes\n",
           {{"version", "1.10"}, {"enabled", "true"}, {"count", "42"}, {"mask", "0x1F"}, {"flag", "yes"}},
           ""},
          {"empty: \"\"\nquoted: \"null\"\n", {{"empty", ""}, {"quoted", "null"}}, ""},
          {"{env: prod, tier: 2}", {{"env", "prod"}, {"tier", "2"}}, ""},
          {R"({"env": "prod", "ray.io/availability-zone": "us-east5-b"})",
           {{"env", "prod"}, {"torus.io/availability-zone", "us-east5-b"}},
           ""},
          {"{\n  \"n\": 3,\n  \"on\": false,\n  \"ratio\": 0.25\n}\n",
           {{"n", "3"}, {"on", "false"}, {"ratio", "0.25"}},
           ""},
          {"{}", {}, ""},
      },
      ParseLabelsFile);
}

TEST(ParseLabelsFileTest, Errors) {
  ExpectParses(
      {
          {"team:\n  name: ml\n",
           {},
           "--labels-file: line 1: the value of \"team\" must be a string, number or boolean, got a map"},
          {"env: prod\nzones: [a, b]\n",
           {},
           "--labels-file: line 2: the value of \"zones\" must be a string, number or boolean, got a list"},
          {R"({"team": {"name": "ml"}})",
           {},
           "--labels-file: line 1: the value of \"team\" must be a string, number or boolean, got a map"},
          {"env:\n", {}, "--labels-file: line 1: the value of \"env\" is null; write \"\" for an empty value"},
          {"env: ~\n", {}, "--labels-file: line 1: the value of \"env\" is null; write \"\" for an empty value"},
          {"- a\n- b\n", {}, "--labels-file: expected a map of label keys to values, got a list"},
          {"hello\n", {}, "--labels-file: expected a map of label keys to values, got a scalar"},
          {"[1, 2]", {}, "--labels-file: expected a map of label keys to values, got a list"},
          {"? [a, b]\n: c\n", {}, "--labels-file: line 1: a label key must be a string, got a list"},
          {"env: prod\nenv: dev\n",
           {},
           "--labels-file: line 2: duplicate key \"env\" (already set by \"env\" on line 1)"},
          {"ray.io/market-type: spot\ntorus.io/market-type: spot\n",
           {},
           "--labels-file: line 2: duplicate key \"torus.io/market-type\" (already set by \"ray.io/market-type\" on "
           "line 1)"},
          {"env: prod\ntorus.io/tpu-topology: 4x4\n",
           {},
           "--labels-file: line 2: label key \"torus.io/tpu-topology\" is reserved; users may set only " + kSettable},
          {"env: prod\nBad Key: x\n",
           {},
           "--labels-file: line 2: label key \"Bad Key\" is invalid: the name contains ' '; " + kNameRule},
          {"env: a b\n",
           {},
           "--labels-file: line 1: label value \"a b\" of key \"env\" is invalid: the value contains ' '; " +
               kValueRule},
          {"a: b\n---\nc: d\n", {}, "--labels-file: expected one YAML document, found 2"},
          {"env: prod\nteam: [ml\n",
           {},
           "--labels-file: invalid YAML at line 3, column 1: end of sequence flow not found"},
          {"env: prod\n- x\n", {}, "--labels-file: invalid YAML at line 2, column 1: end of map not found"},
          {"a: b: c\n", {}, "--labels-file: invalid YAML at line 1, column 5: illegal map value"},
          {"env: &a prod\nx: *b\n",
           {},
           "--labels-file: invalid YAML at line 2, column 4: the referenced anchor is not defined"},
          {"env: prod\n  tier: 2\n", {}, "--labels-file: invalid YAML at line 2, column 7: illegal map value"},
          // yaml-cpp 0.7's LoadAll never returns on a stray ',' (found by labels_fuzz; jbeder/yaml-cpp#1040).
          {",", {}, "--labels-file: invalid YAML at line 1, column 1: unexpected ','"},
          {"--- ,\n", {}, "--labels-file: invalid YAML at line 1, column 5: unexpected ','"},
          {"a: b\n---\n,\n", {}, "--labels-file: invalid YAML at line 3, column 1: unexpected ','"},
          {"{\"env\": \"prod\",\n \"tier\" 2}",
           {},
           "--labels-file: invalid JSON: parse error at line 2, column 9: syntax error while parsing object "
           "separator - unexpected number literal; expected ':'"},
          {"{\"env\": \"prod\"",
           {},
           "--labels-file: invalid JSON: parse error at line 1, column 15: syntax error while parsing object - "
           "unexpected end of input; expected '}'"},
      },
      ParseLabelsFile);
}

TEST(ParseLabelsFileTest, DeepNestingIsAnErrorNotACrash) {
  absl::StatusOr<Labels> labels = ParseLabelsFile("a: " + std::string(100000, '[') + std::string(100000, ']'));
  ASSERT_FALSE(labels.ok());
  EXPECT_EQ(labels.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(labels.status()), ::testing::StartsWith("--labels-file: invalid YAML at line 1"));
  EXPECT_THAT(Message(labels.status()), ::testing::EndsWith(": nested too deeply"));
}

TEST(FormatLabelsTest, KeyOrderAndRoundTrip) {
  EXPECT_EQ(FormatLabels({}), "");
  Labels labels = {{"z", "1"}, {"a", ""}, {"torus.io/market-type", "spot"}, {"example.com/team", "ml"}};
  std::string text = FormatLabels(labels);
  EXPECT_EQ(text, "a=,example.com/team=ml,torus.io/market-type=spot,z=1");
  absl::StatusOr<Labels> parsed = ParseLabelsFlag(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed, labels);
}

}  // namespace labels_test
}  // namespace torus
