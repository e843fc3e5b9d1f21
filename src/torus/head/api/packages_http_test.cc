#include "torus/head/api/packages_http.h"

#include <httplib.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "torus/head/api/http_api.h"
#include "torus/head/state/journal_test_util.h"
#include "torus/package/pack.h"
#include "torus/package/zip.h"

namespace torus::head {
namespace packages_http_test {

using testutil::TempDir;

constexpr char kToken[] = "package-test-token";

// The head's HTTP API (auth, body limit, error bodies) with the package routes, over a memory journal.
class PackagesHttpTest : public ::testing::Test {
 protected:
  PackagesHttpTest()
      : store_(NewMemoryJournal(), clock_.WallMillis(), {}),
        liveness_(&clock_),
        http_(&store_, &liveness_, &clock_, kToken, "cluster") {
    EXPECT_TRUE(store_.Open().ok());
    packages_ = std::make_unique<PackageStore>(&store_, &clock_, dir_.path() + "/packages",
                                               PackageStore::Options{.max_bytes = 64 << 10});
    EXPECT_TRUE(packages_->Open().ok());
    http_.SetMaxBodyBytes(1 << 20);  // the server's limit, above the package limit: the route enforces that
    http_.AddRoutes([this](httplib::Server& s) { RegisterPackageRoutes(s, packages_.get(), &store_); });
    auto port = http_.Start("127.0.0.1", 0);
    EXPECT_TRUE(port.ok());
    port_ = *port;
    client_ = std::make_unique<httplib::Client>("127.0.0.1", port_);
    client_->set_bearer_token_auth(kToken);
  }

  std::string Archive(const std::string& text) {
    const std::string path = dir_.path() + "/a.zip";
    auto w = package::ZipWriter::Create(path);
    EXPECT_TRUE((*w)->Add("mod.py", package::EntryKind::kFile, 0644, 1'700'000'000, text).ok());
    EXPECT_TRUE((*w)->Finish().ok());
    std::ifstream in(path, std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    return bytes.str();
  }

  static nlohmann::json Json(const httplib::Result& res) { return nlohmann::json::parse(res->body); }

  TempDir dir_;
  FakeClock clock_;
  StateStore store_;
  Liveness liveness_;
  std::unique_ptr<PackageStore> packages_;
  HttpApi http_;
  int port_ = 0;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(PackagesHttpTest, RaysClientSequenceGetThenPutThenGetAgain) {
  const std::string zip = Archive("X = 1\n");
  auto missing = client_->Get("/api/packages/gcs/_ray_pkg_0123.zip");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_EQ(Json(missing)["error"], "package _ray_pkg_0123.zip is not on the head");

  auto put = client_->Put("/api/packages/gcs/_ray_pkg_0123.zip", zip, "application/zip");
  ASSERT_TRUE(put);
  ASSERT_EQ(put->status, 200) << put->body;
  EXPECT_EQ(Json(put)["stored"], true);
  EXPECT_EQ(Json(put)["sha256"], package::Sha256Hex(zip));
  EXPECT_EQ(Json(put)["size"], zip.size());

  auto found = client_->Get("/api/packages/gcs/_ray_pkg_0123.zip");
  ASSERT_EQ(found->status, 200);
  EXPECT_EQ(Json(found)["name"], "_ray_pkg_0123.zip");
  auto again = client_->Put("/api/packages/gcs/_ray_pkg_0123.zip", zip, "application/zip");
  ASSERT_EQ(again->status, 200);
  EXPECT_EQ(Json(again)["stored"], false);

  auto list = client_->Get("/api/v0/packages");
  ASSERT_EQ(list->status, 200);
  ASSERT_EQ(Json(list).size(), 1u);
  EXPECT_EQ(Json(list)[0]["uri"], "gcs://_ray_pkg_0123.zip");
  EXPECT_EQ(Json(list)[0]["users"], 0);
  EXPECT_EQ(Json(list)[0]["unused_since_ms"], clock_.WallMillis());
}

TEST_F(PackagesHttpTest, ErrorsNameWhatIsWrong) {
  const std::string zip = Archive("X = 1\n");
  auto other_protocol = client_->Put("/api/packages/s3/_ray_pkg_1.zip", zip, "application/zip");
  EXPECT_EQ(other_protocol->status, 400);
  EXPECT_EQ(Json(other_protocol)["error"],
            "protocol \"s3\" is not supported; packages are uploaded as gcs (PUT /api/packages/gcs/<name>)");
  auto bad_name = client_->Get("/api/packages/gcs/notazip.tar");
  EXPECT_EQ(bad_name->status, 400);
  auto corrupt = client_->Put("/api/packages/gcs/_ray_pkg_2.zip", "PK junk", "application/zip");
  EXPECT_EQ(corrupt->status, 400);
  EXPECT_EQ(Json(corrupt)["error"].get<std::string>().rfind("package _ray_pkg_2.zip: ", 0), 0u) << corrupt->body;
  ASSERT_EQ(client_->Put("/api/packages/gcs/_ray_pkg_3.zip", zip, "application/zip")->status, 200);
  auto conflict = client_->Put("/api/packages/gcs/_ray_pkg_3.zip", Archive("X = 2\n"), "application/zip");
  EXPECT_EQ(conflict->status, 409);
  auto too_big = client_->Put("/api/packages/gcs/_ray_pkg_4.zip", std::string((64 << 10) + 1, 'x'),
                              "application/zip");
  ASSERT_TRUE(too_big);
  EXPECT_EQ(too_big->status, 413);
  EXPECT_EQ(Json(too_big)["error"], "package _ray_pkg_4.zip is larger than the head's limit of 65536 bytes");
  // A chunked body says no length: it is cut off at the limit all the same.
  httplib::Client chunked("127.0.0.1", port_);
  chunked.set_bearer_token_auth(kToken);
  auto streamed = chunked.Put(
      "/api/packages/gcs/_ray_pkg_5.zip",
      [](size_t offset, httplib::DataSink& sink) {
        const std::string piece(16 << 10, 'y');
        if (offset >= (200 << 10)) {
          sink.done();
        } else {
          sink.write(piece.data(), piece.size());
        }
        return true;
      },
      "application/zip");
  // The head answers 413 and closes the connection mid-body: the client sees that, or the reset of its write.
  if (streamed) {
    EXPECT_EQ(streamed->status, 413);
  }
  EXPECT_EQ(client_->Get("/api/packages/gcs/_ray_pkg_5.zip")->status, 404);
  auto over_server_limit = client_->Put("/api/packages/gcs/_ray_pkg_6.zip", std::string((1 << 20) + 1, 'x'),
                                        "application/zip");
  ASSERT_TRUE(over_server_limit);
  EXPECT_EQ(over_server_limit->status, 413);
  EXPECT_EQ(Json(over_server_limit)["error"], "the request body is larger than 1048576 bytes");
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir_.path() + "/packages")) {
    files.push_back(e.path().filename().string());
  }
  EXPECT_EQ(files, std::vector<std::string>{"_ray_pkg_3.zip"});
}

TEST_F(PackagesHttpTest, RoutesNeedTheToken) {
  httplib::Client anonymous("127.0.0.1", port_);
  EXPECT_EQ(anonymous.Get("/api/packages/gcs/_ray_pkg_1.zip")->status, 401);
  EXPECT_EQ(anonymous.Put("/api/packages/gcs/_ray_pkg_1.zip", Archive("1"), "application/zip")->status, 401);
  EXPECT_FALSE(packages_->Find("_ray_pkg_1.zip").has_value());
}

}  // namespace packages_http_test
}  // namespace torus::head
