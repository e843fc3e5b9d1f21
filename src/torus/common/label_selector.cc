#include "torus/common/label_selector.h"

#include <algorithm>
#include <set>
#include <tuple>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "torus/common/status.h"
#include "torus/common/strings.h"

namespace torus {
namespace {

using Op = LabelExpression::Op;

bool IsBlank(char c) { return c == ' ' || c == '\t'; }
// A value runs up to a delimiter of the grammar or a blank; whatever else it holds, ValidateLabelValue judges.
bool EndsValue(char c) { return c == ',' || c == '(' || c == ')' || IsBlank(c); }
bool IsPositive(Op op) { return op == Op::kEquals || op == Op::kIn; }

bool ExpressionLess(const LabelExpression& a, const LabelExpression& b) {
  return std::tie(a.op, a.values) < std::tie(b.op, b.values);
}

// Reads the selector text of one key. Not thread-safe; one per text.
class SelectorTextParser {
 public:
  SelectorTextParser(std::string_view key, std::string_view text) : key_(key), text_(text) {}

  // expr { "," expr }, with at most one positive expression.
  absl::StatusOr<std::vector<LabelExpression>> Parse() {
    std::vector<LabelExpression> expressions;
    bool seen_positive = false;
    while (true) {
      SkipBlanks();
      const size_t start = pos_;
      absl::StatusOr<LabelExpression> expression = ParseExpression();
      if (!expression.ok()) return expression.status();
      if (IsPositive(expression->op)) {
        // A node has one value per key, so two positive expressions are never both meant.
        if (seen_positive) {
          return Error(start, "more than one positive expression (a value or in(...)) on one key; write one in(...)");
        }
        seen_positive = true;
      }
      expressions.push_back(*std::move(expression));
      SkipBlanks();
      if (AtEnd()) break;
      if (Peek() == ',') {
        ++pos_;
        continue;
      }
      if (Peek() == ')') return Error(pos_, "unbalanced ')'");
      if (Peek() == '(') return Error(pos_, "unexpected '('; only in(...) and exists() take parentheses");
      return Error(pos_, absl::StrCat("unexpected ", QuotedChar(Peek()), "; expected ',' or the end of the selector"));
    }
    std::sort(expressions.begin(), expressions.end(), ExpressionLess);
    expressions.erase(std::unique(expressions.begin(), expressions.end()), expressions.end());
    return expressions;
  }

 private:
  static constexpr absl::string_view kExpected = "a value, in(...) or exists()";

  // [ "!" ] ( "in(" values ")" | "exists()" | value ), blanks before it already skipped.
  absl::StatusOr<LabelExpression> ParseExpression() {
    if (AtEnd() || Peek() == ',') return Error(pos_, absl::StrCat("empty expression; expected ", kExpected));
    bool negated = false;
    if (Peek() == '!') {
      negated = true;
      ++pos_;
      SkipBlanks();
      if (AtEnd() || Peek() == ',') return Error(pos_, absl::StrCat("expected ", kExpected, " after '!'"));
      if (Peek() == '!') return Error(pos_, absl::StrCat("a second '!'; expected ", kExpected, " after '!'"));
    }
    std::string_view rest = text_.substr(pos_);
    if (rest.starts_with("in(")) {
      const size_t open = pos_ + 2;
      pos_ += 3;
      absl::StatusOr<std::vector<std::string>> values = ParseInValues(open);
      if (!values.ok()) return values.status();
      return LabelExpression{negated ? Op::kNotIn : Op::kIn, *std::move(values)};
    }
    if (rest.starts_with("exists(")) {
      const size_t open = pos_ + 6;
      pos_ += 7;
      if (AtEnd()) return Error(open, "unbalanced '('; expected ')'");
      if (Peek() != ')') return Error(pos_, "exists() takes no values; expected ')'");
      ++pos_;
      return LabelExpression{negated ? Op::kNotExists : Op::kExists, {}};
    }
    if (Peek() == '(') return Error(pos_, "'(' without in; write in(...) for a set of values");
    if (Peek() == ')') return Error(pos_, "unbalanced ')'");
    absl::StatusOr<std::string> value = ParseValue();
    if (!value.ok()) return value.status();
    if (*value == "in" || *value == "exists") {
      // "in (a)": say what is wrong rather than "unexpected '('".
      const size_t after = pos_;
      SkipBlanks();
      if (pos_ != after && !AtEnd() && Peek() == '(') {
        return Error(after, absl::StrCat("unexpected space; write ", *value == "in" ? "in(...)" : "exists()",
                                         " with no space before '('"));
      }
      pos_ = after;
    }
    return LabelExpression{negated ? Op::kNotEquals : Op::kEquals, {*std::move(value)}};
  }

  // value { "," value } ")", just after the '(' at `open`; returns the values sorted and distinct.
  absl::StatusOr<std::vector<std::string>> ParseInValues(size_t open) {
    std::vector<std::string> values;
    while (true) {
      SkipBlanks();
      if (AtEnd()) return Error(open, "unbalanced '('; expected ')'");
      if (Peek() == ')' && values.empty()) return Error(pos_, "empty in(); expected at least one value");
      if (Peek() == ')' || Peek() == ',') return Error(pos_, "empty value in in(...)");
      if (Peek() == '(') return Error(pos_, "unexpected '(' in in(...); expected a value");
      absl::StatusOr<std::string> value = ParseValue();
      if (!value.ok()) return value.status();
      values.push_back(*std::move(value));
      SkipBlanks();
      if (AtEnd()) return Error(open, "unbalanced '('; expected ')'");
      if (Peek() == ')') {
        ++pos_;
        break;
      }
      if (Peek() != ',') {
        return Error(pos_, absl::StrCat("unexpected ", QuotedChar(Peek()), " in in(...); expected ',' or ')'"));
      }
      ++pos_;
    }
    std::sort(values.begin(), values.end());
    values.erase(std::unique(values.begin(), values.end()), values.end());
    return values;
  }

  // A non-empty label value; the caller has seen that one starts here.
  absl::StatusOr<std::string> ParseValue() {
    const size_t start = pos_;
    while (!AtEnd() && !EndsValue(Peek())) ++pos_;
    std::string_view value = text_.substr(start, pos_ - start);
    if (absl::Status status = ValidateLabelValue(key_, value); !status.ok()) {
      return Error(start, std::string(status.message()));
    }
    return std::string(value);
  }

  void SkipBlanks() {
    while (!AtEnd() && IsBlank(Peek())) ++pos_;
  }
  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek() const { return text_[pos_]; }

  absl::Status Error(size_t position, const std::string& what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("label selector for ", Quoted(key_), ": position ", position, ": ", what));
  }

  std::string_view key_;
  std::string_view text_;
  size_t pos_ = 0;
};

bool Holds(const LabelExpression& expression, const std::string* value) {
  auto in_values = [&] {
    return value != nullptr &&
           std::binary_search(expression.values.begin(), expression.values.end(), *value);
  };
  switch (expression.op) {
    case Op::kEquals:
      return value != nullptr && *value == expression.values.front();
    case Op::kNotEquals:
      return value == nullptr || *value != expression.values.front();
    case Op::kIn:
      return in_values();
    case Op::kNotIn:
      return !in_values();
    case Op::kExists:
      return value != nullptr;
    case Op::kNotExists:
      return value == nullptr;
  }
  return false;
}

std::string FormatExpression(const LabelExpression& expression) {
  const std::string join = absl::StrJoin(expression.values, ",");
  switch (expression.op) {
    case Op::kEquals:
      return join;
    case Op::kNotEquals:
      return absl::StrCat("!", join);
    case Op::kIn:
      return absl::StrCat("in(", join, ")");
    case Op::kNotIn:
      return absl::StrCat("!in(", join, ")");
    case Op::kExists:
      return "exists()";
    case Op::kNotExists:
      return "!exists()";
  }
  return "";
}

// Drops nlohmann's "[json.exception.parse_error.101] " tag from its message.
std::string JsonErrorText(const nlohmann::json::exception& e) {
  std::string_view text = e.what();
  if (text.starts_with("[json.exception.")) {
    size_t end = text.find("] ");
    if (end != std::string_view::npos) text.remove_prefix(end + 2);
  }
  return std::string(text);
}

}  // namespace

absl::StatusOr<LabelSelector> LabelSelector::Parse(const std::map<std::string, std::string>& selector) {
  LabelSelector result;
  std::map<std::string, std::string, std::less<>> written_as;  // canonical key -> key as the user wrote it
  for (const auto& [key, text] : selector) {
    absl::StatusOr<std::string> canonical = CanonicalLabelKey(key);
    if (!canonical.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("label selector: ", canonical.status().message()));
    }
    auto [it, inserted] = written_as.emplace(*canonical, key);
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrCat("label selector: keys ", Quoted(it->second), " and ", Quoted(key),
                                                     " both select ", *canonical, "; write one"));
    }
    absl::StatusOr<std::vector<LabelExpression>> expressions = SelectorTextParser(key, text).Parse();
    if (!expressions.ok()) return expressions.status();
    result.expressions_.emplace(*std::move(canonical), *std::move(expressions));
  }
  return result;
}

absl::StatusOr<LabelSelector> LabelSelector::ParseJson(std::string_view json) {
  nlohmann::json parsed;
  std::set<std::string> seen;
  std::string duplicate;
  // nlohmann keeps the last of duplicate keys silently; a selector that says two things about one key is an error.
  auto note_keys = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& value) {
    if (event == nlohmann::json::parse_event_t::key && depth == 1 && duplicate.empty() && value.is_string() &&
        !seen.insert(value.get<std::string>()).second) {
      duplicate = value.get<std::string>();
    }
    return true;
  };
  try {
    parsed = nlohmann::json::parse(json.begin(), json.end(), note_keys);
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("label selector: invalid JSON: ", JsonErrorText(e)));
  }
  if (!parsed.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "label selector: expected a JSON object of label keys to selector strings, got ", parsed.type_name()));
  }
  if (!duplicate.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("label selector: duplicate key ", Quoted(duplicate)));
  }
  std::map<std::string, std::string> selector;
  for (const auto& [key, value] : parsed.items()) {
    if (!value.is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat("label selector for ", Quoted(key), ": expected a string, got ", value.type_name()));
    }
    selector.emplace(key, value.get<std::string>());
  }
  return Parse(selector);
}

bool LabelSelector::Matches(const Labels& labels) const {
  for (const auto& [key, expressions] : expressions_) {
    auto it = labels.find(key);
    const std::string* value = it == labels.end() ? nullptr : &it->second;
    for (const LabelExpression& expression : expressions) {
      if (!Holds(expression, value)) return false;
    }
  }
  return true;
}

const std::vector<std::string>* LabelSelector::AllowedValues(std::string_view key) const {
  auto it = expressions_.find(key);
  if (it == expressions_.end()) return nullptr;
  for (const LabelExpression& expression : it->second) {
    if (IsPositive(expression.op)) return &expression.values;
  }
  return nullptr;
}

std::string LabelSelector::ToString() const {
  // Keys and values are validated (letters, digits, '-', '_', '.', '/'), so they need no JSON escaping.
  std::string out = "{";
  for (const auto& [key, expressions] : expressions_) {
    absl::StrAppend(&out, out.size() == 1 ? "" : ", ", "\"", key, "\": \"",
                    absl::StrJoin(expressions, ",",
                                  [](std::string* to, const LabelExpression& e) {
                                    absl::StrAppend(to, FormatExpression(e));
                                  }),
                    "\"");
  }
  out += "}";
  return out;
}

}  // namespace torus
