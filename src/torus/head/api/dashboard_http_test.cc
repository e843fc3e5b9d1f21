#include "torus/head/api/dashboard_http.h"

#include <httplib.h>

#include <regex>
#include <set>
#include <string>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace torus::head {
namespace dashboard_http_test {

using ::testing::HasSubstr;

const EmbeddedFile kFiles[] = {
    {"index.html", "<!doctype html><title>t</title>", "\"etag-index\""},
    {"app.js", "console.log(1);", "\"etag-app\""},
    {"style.css", "body{}", "\"etag-style\""},
};

// A server on a free loopback port serving `files`; stopped on destruction.
class DashboardServer {
 public:
  explicit DashboardServer(std::span<const EmbeddedFile> files) {
    AddDashboardRoutes(server_, files);
    port_ = server_.bind_to_any_port("127.0.0.1");  // listening from here on; accepted once the loop runs
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~DashboardServer() {
    server_.stop();
    thread_.join();
  }
  httplib::Client Client() const { return httplib::Client("127.0.0.1", port_); }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
};

TEST(DashboardHttpTest, ServesIndexAtRootWithPagePolicy) {
  DashboardServer server(kFiles);
  auto res = server.Client().Get("/");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body, "<!doctype html><title>t</title>");
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/html; charset=utf-8");
  EXPECT_EQ(res->get_header_value("ETag"), "\"etag-index\"");
  EXPECT_EQ(res->get_header_value("Cache-Control"), "no-cache");
  EXPECT_THAT(res->get_header_value("Content-Security-Policy"), HasSubstr("script-src 'self'"));
  EXPECT_EQ(res->get_header_value("X-Frame-Options"), "DENY");
}

TEST(DashboardHttpTest, ServesStaticFilesWithTheirContentType) {
  DashboardServer server(kFiles);
  auto client = server.Client();
  auto js = client.Get("/static/app.js");
  ASSERT_TRUE(js);
  EXPECT_EQ(js->status, 200);
  EXPECT_EQ(js->body, "console.log(1);");
  EXPECT_EQ(js->get_header_value("Content-Type"), "text/javascript; charset=utf-8");
  EXPECT_EQ(js->get_header_value("X-Content-Type-Options"), "nosniff");
  auto css = client.Get("/static/style.css");
  ASSERT_TRUE(css);
  EXPECT_EQ(css->get_header_value("Content-Type"), "text/css; charset=utf-8");
}

TEST(DashboardHttpTest, AnswersNotModifiedForAMatchingETag) {
  DashboardServer server(kFiles);
  auto client = server.Client();
  for (const char* tag : {"\"etag-app\"", "W/\"etag-app\"", "\"other\", \"etag-app\"", "*"}) {
    auto res = client.Get("/static/app.js", {{"If-None-Match", tag}});
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 304) << tag;
    EXPECT_EQ(res->body, "") << tag;
    EXPECT_EQ(res->get_header_value("ETag"), "\"etag-app\"") << tag;
  }
  auto changed = client.Get("/static/app.js", {{"If-None-Match", "\"etag-old\""}});
  ASSERT_TRUE(changed);
  EXPECT_EQ(changed->status, 200);
}

TEST(DashboardHttpTest, UnknownAndTraversingNamesAre404) {
  DashboardServer server(kFiles);
  auto client = server.Client();
  for (const char* path : {"/static/nope.js", "/static/..", "/static/../dashboard_http.cc", "/static/%2e%2e/x",
                           "/static/", "/static/sub/app.js"}) {
    auto res = client.Get(path);
    ASSERT_TRUE(res) << path;
    EXPECT_EQ(res->status, 404) << path;
  }
}

TEST(DashboardHttpTest, ContentTypes) {
  EXPECT_EQ(DashboardContentType("a.html"), "text/html; charset=utf-8");
  EXPECT_EQ(DashboardContentType("a.svg"), "image/svg+xml");
  EXPECT_EQ(DashboardContentType("a.bin"), "application/octet-stream");
  EXPECT_EQ(DashboardContentType("js"), "application/octet-stream");
}

// The embedded page is whole: index.html and every file it or a module names by /static/ or ./ exist.
TEST(DashboardHttpTest, EmbeddedPageReferencesOnlyEmbeddedFiles) {
  std::set<std::string> names;
  for (std::size_t i = 0; i < kDashboardFileCount; ++i) names.insert(std::string(kDashboardFiles[i].name));
  ASSERT_TRUE(names.count("index.html"));
  ASSERT_TRUE(names.count("app.js"));
  ASSERT_TRUE(names.count("style.css"));
  const std::regex reference(R"((?:/static/|from '\./|import\('\./)([A-Za-z0-9_.-]+))");
  int references = 0;
  for (std::size_t i = 0; i < kDashboardFileCount; ++i) {
    const std::string text(kDashboardFiles[i].data);
    for (std::sregex_iterator it(text.begin(), text.end(), reference), end; it != end; ++it) {
      ++references;
      EXPECT_TRUE(names.count((*it)[1].str())) << kDashboardFiles[i].name << " names " << (*it)[1].str();
    }
    EXPECT_FALSE(kDashboardFiles[i].etag.empty());
  }
  EXPECT_GT(references, 3);
}

}  // namespace dashboard_http_test
}  // namespace torus::head
