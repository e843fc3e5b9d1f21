// The HTTP MetadataSource: GCE metadata server attributes over cpp-httplib.
#include <httplib.h>

#include <memory>
#include <optional>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "torus/accel/tpu_detect.h"

namespace torus {
namespace {

constexpr char kDefaultBaseUrl[] = "http://metadata.google.internal";
constexpr char kAttributesPath[] = "/computeMetadata/v1/instance/attributes/";
// Short, because detection runs at agent start-up and off GCE the server never answers.
constexpr time_t kTimeoutSeconds = 1;

// Thread-safe: each request builds its own client, so concurrent lookups share nothing.
class HttpMetadataSource : public MetadataSource {
 public:
  HttpMetadataSource(std::string scheme_host_port, std::string path_prefix)
      : scheme_host_port_(std::move(scheme_host_port)), path_prefix_(std::move(path_prefix)) {}

  std::optional<std::string> GetAttribute(const std::string& key) override {
    httplib::Client client(scheme_host_port_);
    if (!client.is_valid()) return std::nullopt;
    client.set_connection_timeout(kTimeoutSeconds, 0);
    client.set_read_timeout(kTimeoutSeconds, 0);
    client.set_write_timeout(kTimeoutSeconds, 0);
    client.set_keep_alive(false);
    const httplib::Headers headers = {{"Metadata-Flavor", "Google"}};
    httplib::Result result = client.Get(absl::StrCat(path_prefix_, kAttributesPath, key), headers);
    // Errors, redirects and empty answers all mean "not set": the metadata server answers 404 for absent keys,
    // and an empty attribute carries no fact.
    if (!result || result->status != 200 || result->body.empty()) return std::nullopt;
    return result->body;
  }

 private:
  const std::string scheme_host_port_;  // "http://127.0.0.1:8099"
  const std::string path_prefix_;       // "" or "/prefix", for a base URL with a path
};

}  // namespace

std::unique_ptr<MetadataSource> MakeHttpMetadataSource(const std::string& base_url) {
  std::string url = base_url.empty() ? std::string(kDefaultBaseUrl) : base_url;
  while (absl::EndsWith(url, "/")) url.pop_back();
  // httplib::Client takes scheme://host[:port] only; a path in the base URL becomes a prefix of every request.
  std::string prefix;
  const size_t scheme_end = url.find("://");
  const size_t path_start = url.find('/', scheme_end == std::string::npos ? 0 : scheme_end + 3);
  if (path_start != std::string::npos) {
    prefix = url.substr(path_start);
    url.resize(path_start);
  }
  return std::make_unique<HttpMetadataSource>(std::move(url), std::move(prefix));
}

}  // namespace torus
