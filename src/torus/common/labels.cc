#include "torus/common/labels.h"

#include <algorithm>
#include <array>
#include <exception>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "torus/common/status.h"
#include "torus/common/strings.h"
#include "torus/common/well_known_labels.h"
#include "yaml-cpp/depthguard.h"
#include "yaml-cpp/eventhandler.h"
#include "yaml-cpp/yaml.h"

namespace torus {
namespace {

constexpr size_t kMaxNameLength = 63;
constexpr size_t kMaxPrefixLength = 253;
constexpr size_t kMaxPrefixSegmentLength = 63;

constexpr absl::string_view kKeyRule = "a key is an optional prefix and '/' followed by a name";
constexpr absl::string_view kNameRule =
    "a name is 1-63 characters: letters, digits, '-', '_' or '.', beginning and ending with a letter or digit";
constexpr absl::string_view kPrefixRule =
    "a prefix is dot-separated DNS labels of 1-63 letters, digits or '-', each beginning and ending with a letter "
    "or digit, at most 253 characters in all";
constexpr absl::string_view kValueRule =
    "a value is empty, or 1-63 characters: letters, digits, '-', '_' or '.', beginning and ending with a letter "
    "or digit";

std::string_view ToStd(absl::string_view text) { return std::string_view(text.data(), text.size()); }

// "a, b, c" of the well-known names or keys.
template <size_t N>
std::string JoinNames(const std::array<std::string_view, N>& names) {
  std::string out;
  for (std::string_view name : names) absl::StrAppend(&out, out.empty() ? "" : ", ", AbslView(name));
  return out;
}

bool IsNameChar(char c) { return absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.'; }
bool IsDnsChar(char c) { return absl::ascii_isalnum(c) || c == '-'; }

// What is wrong with `name` as a §2 name, said of `subject` ("the name", "the value"); empty when it is valid.
std::string NameProblem(absl::string_view subject, std::string_view name) {
  if (name.empty()) return absl::StrCat(subject, " is empty");
  if (name.size() > kMaxNameLength) return absl::StrCat(subject, " is ", name.size(), " characters long");
  auto bad = std::find_if_not(name.begin(), name.end(), IsNameChar);
  if (bad != name.end()) return absl::StrCat(subject, " contains ", QuotedChar(*bad));
  if (!absl::ascii_isalnum(name.front())) return absl::StrCat(subject, " begins with ", QuotedChar(name.front()));
  if (!absl::ascii_isalnum(name.back())) return absl::StrCat(subject, " ends with ", QuotedChar(name.back()));
  return {};
}

// What is wrong with `prefix` as a DNS subdomain; empty when it is valid. Unlike Ray's regex, empty segments
// (`a..b`, `.a`, `a.`) are errors, as in DNS.
std::string PrefixProblem(std::string_view prefix) {
  if (prefix.size() > kMaxPrefixLength) return absl::StrCat("the prefix is ", prefix.size(), " characters long");
  int index = 0;
  for (absl::string_view segment : absl::StrSplit(AbslView(prefix), '.')) {
    ++index;
    std::string subject = absl::StrCat("prefix segment ", index);
    if (segment.empty()) return absl::StrCat(subject, " is empty");
    if (segment.size() > kMaxPrefixSegmentLength) {
      return absl::StrCat(subject, " is ", segment.size(), " characters long");
    }
    auto bad = std::find_if_not(segment.begin(), segment.end(), IsDnsChar);
    if (bad != segment.end()) return absl::StrCat(subject, " contains ", QuotedChar(*bad));
    if (!absl::ascii_isalnum(segment.front())) {
      return absl::StrCat(subject, " begins with ", QuotedChar(segment.front()));
    }
    if (!absl::ascii_isalnum(segment.back())) return absl::StrCat(subject, " ends with ", QuotedChar(segment.back()));
  }
  return {};
}

absl::Status InvalidKey(std::string_view key, absl::string_view problem, absl::string_view rule) {
  return absl::InvalidArgumentError(absl::StrCat("label key ", Quoted(key), " is invalid: ", problem, "; ", rule));
}

bool IsUserSettable(std::string_view canonical_key) {
  return std::find(kUserSettableWellKnownLabels.begin(), kUserSettableWellKnownLabels.end(), canonical_key) !=
         kUserSettableWellKnownLabels.end();
}

// Validates one user label and returns its canonical key.
absl::StatusOr<std::string> CanonicalUserLabel(std::string_view key, std::string_view value) {
  TORUS_ASSIGN_OR_RETURN(std::string canonical, CanonicalLabelKey(key));
  if (canonical.starts_with(kLabelPrefix) && !IsUserSettable(canonical)) {
    std::string read_as = canonical == key ? "" : absl::StrCat(" (read as ", canonical, ")");
    return absl::InvalidArgumentError(absl::StrCat("label key ", Quoted(key), read_as,
                                                   " is reserved; users may set only ",
                                                   JoinNames(kUserSettableWellKnownLabels)));
  }
  TORUS_RETURN_IF_ERROR(ValidateLabelValue(key, value));
  return canonical;
}

// Parse errors of a labels file that is JSON: yaml-cpp's messages for broken JSON ("end of map flow not found")
// say little, so such a file is re-read by the JSON parser for its reason and position.
std::string JsonParseError(std::string_view contents) {
  try {
    nlohmann::json parsed = nlohmann::json::parse(contents.begin(), contents.end());
    (void)parsed;
  } catch (const nlohmann::json::exception& e) {
    std::string_view text = e.what();
    // Drops the "[json.exception.parse_error.101] " tag.
    if (text.starts_with("[json.exception.")) {
      size_t end = text.find("] ");
      if (end != std::string_view::npos) text.remove_prefix(end + 2);
    }
    return std::string(text);
  }
  return {};
}

absl::string_view NodeKind(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
      return "null";
    case YAML::NodeType::Scalar:
      return "a scalar";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a map";
    case YAML::NodeType::Undefined:
      break;
  }
  return "nothing";
}

// "line 3: ", to open an error about `node`; empty when yaml-cpp has no position for it.
std::string AtLine(const YAML::Node& node) {
  const YAML::Mark mark = node.Mark();
  if (mark.is_null()) return "";
  return absl::StrCat("line ", mark.line + 1, ": ");
}

// " on line 3", to point back at an earlier entry.
std::string OnLine(const YAML::Node& node) {
  const YAML::Mark mark = node.Mark();
  if (mark.is_null()) return "";
  return absl::StrCat(" on line ", mark.line + 1);
}

// Remembers where each document of a YAML stream starts; the events themselves are not needed.
class DocumentStarts : public YAML::EventHandler {
 public:
  // The start of the latest document, and whether it starts where the one before it did.
  const YAML::Mark& last() const { return last_; }
  bool repeated() const { return repeated_; }

  void OnDocumentStart(const YAML::Mark& mark) override {
    repeated_ = started_ && mark.pos == last_.pos;
    started_ = true;
    last_ = mark;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}

 private:
  YAML::Mark last_;
  bool started_ = false;
  bool repeated_ = false;
};

// YAML::LoadAll, except on a stream that yaml-cpp 0.7 cannot get past: on a stray ',' (",", "--- ,") its parser
// reports an empty document without consuming the token, and LoadAll adds empty documents for ever, until memory
// runs out (jbeder/yaml-cpp#1040, fixed upstream after 0.8.0). The documents' starts are read first; a document
// that starts where the previous one did throws the ParserException a fixed yaml-cpp would.
std::vector<YAML::Node> LoadAllDocuments(const std::string& text) {
  std::istringstream stream(text);
  YAML::Parser parser(stream);
  DocumentStarts starts;
  while (parser.HandleNextDocument(starts)) {
    if (starts.repeated()) {
      const size_t at = std::min(static_cast<size_t>(std::max(starts.last().pos, 0)), text.size());
      throw YAML::ParserException(
          starts.last(), absl::StrCat("unexpected '", absl::CHexEscape(absl::string_view(text).substr(at, 1)), "'"));
    }
  }
  return YAML::LoadAll(text);
}

// Reads a parsed labels document; yaml-cpp may still throw on a malformed node, so the caller catches.
absl::StatusOr<Labels> LabelsFromYaml(const YAML::Node& root) {
  constexpr absl::string_view kFile = "--labels-file: ";
  Labels labels;
  if (!root.IsDefined() || root.IsNull()) return labels;  // an empty file sets no labels
  if (!root.IsMap()) {
    return absl::InvalidArgumentError(
        absl::StrCat(kFile, "expected a map of label keys to values, got ", NodeKind(root)));
  }
  std::map<std::string, std::string, std::less<>> first_seen;  // canonical key -> where it was set
  for (const auto& entry : root) {
    const YAML::Node& key_node = entry.first;
    const YAML::Node& value_node = entry.second;
    if (!key_node.IsScalar()) {
      return absl::InvalidArgumentError(
          absl::StrCat(kFile, AtLine(key_node), "a label key must be a string, got ", NodeKind(key_node)));
    }
    const std::string& key = key_node.Scalar();
    if (value_node.IsNull()) {
      return absl::InvalidArgumentError(absl::StrCat(kFile, AtLine(key_node), "the value of ", Quoted(key),
                                                     " is null; write \"\" for an empty value"));
    }
    if (!value_node.IsScalar()) {
      return absl::InvalidArgumentError(absl::StrCat(kFile, AtLine(key_node), "the value of ", Quoted(key),
                                                     " must be a string, number or boolean, got ",
                                                     NodeKind(value_node)));
    }
    // Scalar() is the text as written, so `1.10` stays "1.10" and `yes` stays "yes".
    const std::string& value = value_node.Scalar();
    absl::StatusOr<std::string> canonical = CanonicalUserLabel(key, value);
    if (!canonical.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(kFile, AtLine(key_node), canonical.status().message()));
    }
    auto [it, inserted] = first_seen.emplace(*canonical, absl::StrCat(Quoted(key), OnLine(key_node)));
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrCat(kFile, AtLine(key_node), "duplicate key ", Quoted(*canonical),
                                                     " (already set by ", it->second, ")"));
    }
    labels.emplace(std::move(*canonical), value);
  }
  return labels;
}

}  // namespace

absl::Status ValidateLabelKey(std::string_view key) {
  if (key.empty()) return InvalidKey(key, "the key is empty", kKeyRule);
  size_t slash = key.find('/');
  if (slash == std::string_view::npos) {
    std::string problem = NameProblem("the name", key);
    return problem.empty() ? absl::OkStatus() : InvalidKey(key, problem, kNameRule);
  }
  if (key.find('/', slash + 1) != std::string_view::npos) {
    return InvalidKey(key, "it contains more than one '/'", kKeyRule);
  }
  std::string_view prefix = key.substr(0, slash);
  if (prefix.empty()) return InvalidKey(key, "the prefix before '/' is empty", kPrefixRule);
  if (std::string problem = PrefixProblem(prefix); !problem.empty()) return InvalidKey(key, problem, kPrefixRule);
  std::string problem = NameProblem("the name", key.substr(slash + 1));
  return problem.empty() ? absl::OkStatus() : InvalidKey(key, problem, kNameRule);
}

absl::Status ValidateLabelValue(std::string_view key, std::string_view value) {
  if (value.empty()) return absl::OkStatus();
  std::string problem = NameProblem("the value", value);
  if (problem.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("label value ", Quoted(value), " of key ", Quoted(key), " is invalid: ", problem, "; ", kValueRule));
}

absl::StatusOr<std::string> CanonicalLabelKey(std::string_view key) {
  TORUS_RETURN_IF_ERROR(ValidateLabelKey(key));
  if (!key.starts_with(kRayLabelPrefix)) return std::string(key);
  std::string_view name = key.substr(kRayLabelPrefix.size());
  if (std::find(kWellKnownLabelNames.begin(), kWellKnownLabelNames.end(), name) == kWellKnownLabelNames.end()) {
    return absl::InvalidArgumentError(absl::StrCat("label key ", Quoted(key),
                                                   " is not supported: ray.io/ keys are read as torus.io/ keys "
                                                   "only for ",
                                                   JoinNames(kWellKnownLabelNames)));
  }
  return absl::StrCat(AbslView(kLabelPrefix), AbslView(name));
}

absl::StatusOr<Labels> CanonicalUserLabels(const Labels& labels) {
  Labels result;
  std::map<std::string, std::string, std::less<>> given_as;  // canonical key -> key as the user wrote it
  for (const auto& [key, value] : labels) {
    TORUS_ASSIGN_OR_RETURN(std::string canonical, CanonicalUserLabel(key, value));
    auto [it, inserted] = given_as.emplace(canonical, key);
    if (!inserted) {
      return absl::InvalidArgumentError(
          absl::StrCat("label keys ", Quoted(it->second), " and ", Quoted(key), " both set ", canonical));
    }
    result.emplace(std::move(canonical), value);
  }
  return result;
}

absl::StatusOr<Labels> ParseLabelsFlag(std::string_view text) {
  Labels labels;
  if (absl::StripAsciiWhitespace(AbslView(text)).empty()) return labels;
  std::map<std::string, std::string, std::less<>> set_by;  // canonical key -> the item that set it
  int index = 0;
  for (absl::string_view raw_item : absl::StrSplit(AbslView(text), ',')) {
    ++index;
    std::string_view item = ToStd(absl::StripAsciiWhitespace(raw_item));
    if (item.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("invalid --labels: item ", index, " is empty; expected key=value,key2=value2"));
    }
    size_t equals = item.find('=');
    if (equals == std::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat("invalid --labels item ", Quoted(item), ": expected key=value"));
    }
    // Spaces around '=' are trimmed as Ray does; they could never be part of a valid key or value.
    std::string_view key = ToStd(absl::StripAsciiWhitespace(AbslView(item.substr(0, equals))));
    std::string_view value = ToStd(absl::StripAsciiWhitespace(AbslView(item.substr(equals + 1))));
    if (key.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("invalid --labels item ", Quoted(item), ": the key is empty; expected key=value"));
    }
    absl::StatusOr<std::string> canonical = CanonicalUserLabel(key, value);
    if (!canonical.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("invalid --labels item ", Quoted(item), ": ", canonical.status().message()));
    }
    auto [it, inserted] = set_by.emplace(*canonical, item);
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrCat("invalid --labels item ", Quoted(item), ": duplicate key ",
                                                     Quoted(*canonical), " (already set by ", Quoted(it->second), ")"));
    }
    labels.emplace(std::move(*canonical), value);
  }
  return labels;
}

absl::StatusOr<Labels> ParseLabelsFile(std::string_view contents) {
  constexpr absl::string_view kFile = "--labels-file: ";
  std::vector<YAML::Node> documents;
  try {
    documents = LoadAllDocuments(std::string(contents));
  } catch (const YAML::Exception& e) {
    if (ToStd(absl::StripLeadingAsciiWhitespace(AbslView(contents))).starts_with("{")) {
      if (std::string json_error = JsonParseError(contents); !json_error.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(kFile, "invalid JSON: ", json_error));
      }
    }
    // yaml-cpp reports its nesting limit as "bad file", which would send the user looking at the wrong thing.
    std::string reason = dynamic_cast<const YAML::DeepRecursion*>(&e) != nullptr ? "nested too deeply" : e.msg;
    if (e.mark.is_null()) return absl::InvalidArgumentError(absl::StrCat(kFile, "invalid YAML: ", reason));
    return absl::InvalidArgumentError(
        absl::StrCat(kFile, "invalid YAML at line ", e.mark.line + 1, ", column ", e.mark.column + 1, ": ", reason));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(kFile, "invalid YAML: ", e.what()));
  }
  if (documents.empty()) return Labels();
  if (documents.size() > 1) {
    return absl::InvalidArgumentError(absl::StrCat(kFile, "expected one YAML document, found ", documents.size()));
  }
  try {
    return LabelsFromYaml(documents.front());
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(kFile, "invalid YAML: ", e.msg));
  }
}

std::string FormatLabels(const Labels& labels) { return absl::StrJoin(labels, ",", absl::PairFormatter("=")); }

}  // namespace torus
