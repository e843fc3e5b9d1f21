#include "torus/head/api/events_http.h"

#include <httplib.h>

#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "torus/head/api/event_test_util.h"
#include "nlohmann/json.hpp"

namespace torus::head {
namespace events_http_test {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testutil::JobEvent;


// The event routes on a free loopback port, over `log`; stopped on destruction.
class EventServer {
 public:
  explicit EventServer(EventLog* log) : log_(log) {
    RegisterEventRoutes(server_, log);
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~EventServer() {
    log_->Close();
    server_.stop();
    thread_.join();
  }
  httplib::Client Client() const { return httplib::Client("127.0.0.1", port_); }

 private:
  EventLog* log_;
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
};

nlohmann::json Body(const httplib::Result& res) { return nlohmann::json::parse(res->body); }

TEST(EventsHttpTest, ListsTheKeptEventsAfterARevisionThatMatch) {
  EventLog log(4, 100);
  EventServer server(&log);
  log.Append({JobEvent("a", "PENDING"), JobEvent("b", "PENDING"), JobEvent("a", "RUNNING")});
  auto all = server.Client().Get("/api/v0/events");
  ASSERT_TRUE(all);
  ASSERT_EQ(all->status, 200) << all->body;
  EXPECT_EQ(Body(all)["epoch"], 4);
  EXPECT_EQ(Body(all)["revision"], 3);
  EXPECT_EQ(Body(all)["events"].size(), 3u);
  auto of_a = server.Client().Get("/api/v0/events?since=1&id=a&kind=job");
  ASSERT_TRUE(of_a);
  ASSERT_EQ(of_a->status, 200);
  const nlohmann::json events = Body(of_a)["events"];
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0], nlohmann::json::parse(R"({"revision":3,"kind":"job","id":"a","type":"JobUpdated",
      "status":"RUNNING"})"));
}

TEST(EventsHttpTest, ALongPollAnswersWithTheEventThatArrivesDuringIt) {
  EventLog log(1, 100);
  EventServer server(&log);
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    log.Append({JobEvent("a", "SUCCEEDED")});
  });
  auto res = server.Client().Get("/api/v0/events?since=0&id=a&wait_ms=60000");
  writer.join();
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  ASSERT_EQ(Body(res)["events"].size(), 1u);
  EXPECT_EQ(Body(res)["events"][0]["status"], "SUCCEEDED");
}

TEST(EventsHttpTest, AResumeFromAnotherEpochOrDroppedEventsIsGoneWithWhereToResume) {
  EventLog log(2, /*capacity=*/2);
  EventServer server(&log);
  log.Append({JobEvent("a", "PENDING"), JobEvent("a", "RUNNING"), JobEvent("a", "SUCCEEDED")});
  auto other_epoch = server.Client().Get("/api/v0/events?since=1&epoch=1");
  ASSERT_TRUE(other_epoch);
  EXPECT_EQ(other_epoch->status, 410);
  EXPECT_EQ(Body(other_epoch)["epoch"], 2);
  EXPECT_EQ(Body(other_epoch)["revision"], 3);
  EXPECT_THAT(Body(other_epoch)["error"].get<std::string>(), HasSubstr("the head has restarted since epoch 1"));
  auto dropped = server.Client().Get("/api/v0/events?since=0&epoch=2");
  ASSERT_TRUE(dropped);
  EXPECT_EQ(dropped->status, 410);
  EXPECT_THAT(Body(dropped)["error"].get<std::string>(), HasSubstr("no longer kept"));
}

TEST(EventsHttpTest, BadParametersAreRefusedByName) {
  EventLog log(1, 10);
  EventServer server(&log);
  auto client = server.Client();
  struct Case {
    std::string query;
    std::string error;
  };
  for (const Case& c : std::vector<Case>{
           {"since=-1", "query parameter since must be a revision"},
           {"since=x", "query parameter since must be a revision"},
           {"since=7", "revision 7 is ahead of this head's newest, 0"},
           {"epoch=0", "query parameter epoch must be a whole number of at least 1"},
           {"kind=job,pod", "query parameter kind: unknown kind \"pod\""},
           {"wait_ms=600000", "query parameter wait_ms must be a whole number of milliseconds from 0 to 60000"},
           {"watch=yes", "query parameter watch must be 1, true, 0 or false"},
       }) {
    auto res = client.Get("/api/v0/events?" + c.query);
    ASSERT_TRUE(res) << c.query;
    EXPECT_EQ(res->status, 400) << c.query;
    EXPECT_THAT(Body(res)["error"].get<std::string>(), HasSubstr(c.error)) << c.query;
  }
}

// Reads a server-sent event stream until `stop` says so; returns each event as "event|id|data".
std::vector<std::string> ReadStream(httplib::Client& client, const std::string& path,
                                    const std::function<bool(const std::vector<std::string>&)>& stop) {
  std::vector<std::string> events;
  std::string buffer;
  client.Get(path, [&](const char* data, size_t n) {
    buffer.append(data, n);
    size_t end;
    while ((end = buffer.find("\n\n")) != std::string::npos) {
      std::string block = buffer.substr(0, end);
      buffer.erase(0, end + 2);
      std::string event, id, payload;
      size_t pos = 0;
      while (pos < block.size()) {
        size_t nl = block.find('\n', pos);
        if (nl == std::string::npos) nl = block.size();
        std::string line = block.substr(pos, nl - pos);
        if (line.rfind("event: ", 0) == 0) event = line.substr(7);
        if (line.rfind("id: ", 0) == 0) id = line.substr(4);
        if (line.rfind("data: ", 0) == 0) payload = line.substr(6);
        pos = nl + 1;
      }
      events.push_back(event + "|" + id + "|" + payload);
    }
    return !stop(events);
  });
  return events;
}

TEST(EventsHttpTest, AStreamSendsHelloThenEachMatchingEventAsItHappens) {
  EventLog log(5, 100);
  EventServer server(&log);
  log.Append({JobEvent("a", "PENDING")});  // before the watch: not sent (the stream starts from now)
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    log.Append({JobEvent("b", "PENDING")});
    log.Append({JobEvent("a", "RUNNING")});
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // each in its own read of the stream
    log.Append({JobEvent("a", "SUCCEEDED")});
  });
  auto client = server.Client();
  auto events = ReadStream(client, "/api/v0/events?watch=1&id=a",
                           [](const std::vector<std::string>& got) { return got.size() >= 3; });
  writer.join();
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0], R"(hello||{"epoch":5,"revision":1})");
  EXPECT_EQ(events[1], R"(job|3|{"id":"a","kind":"job","revision":3,"status":"RUNNING","type":"JobUpdated"})");
  EXPECT_EQ(events[2], R"(job|4|{"id":"a","kind":"job","revision":4,"status":"SUCCEEDED","type":"JobUpdated"})");
}

TEST(EventsHttpTest, AStreamResumesFromTheRevisionItIsGiven) {
  EventLog log(1, 100);
  EventServer server(&log);
  log.Append({JobEvent("a", "PENDING"), JobEvent("a", "RUNNING"), JobEvent("a", "SUCCEEDED")});
  auto client = server.Client();
  auto events = ReadStream(client, "/api/v0/events?watch=1&since=1&epoch=1",
                           [](const std::vector<std::string>& got) { return got.size() >= 3; });
  ASSERT_EQ(events.size(), 3u);
  EXPECT_THAT(events[0], HasSubstr("hello||"));
  EXPECT_THAT(events[1], HasSubstr("job|2|"));
  EXPECT_THAT(events[2], HasSubstr("job|3|"));
}

TEST(EventsHttpTest, AStreamEndsWithAnErrorEventWhenTheHeadStops) {
  EventLog log(1, 100);
  EventServer server(&log);
  std::thread closer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    log.Close();
  });
  auto client = server.Client();
  auto events = ReadStream(client, "/api/v0/events?watch=1", [](const std::vector<std::string>&) { return false; });
  closer.join();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_THAT(events[1], HasSubstr("error||"));
  EXPECT_THAT(events[1], HasSubstr("the head is stopping"));
}

}  // namespace events_http_test
}  // namespace torus::head
