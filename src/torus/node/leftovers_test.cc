#include "torus/node/leftovers.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

namespace torus::node {
namespace leftovers_test {

pid_t StartSleeper(const std::string& mark_value) {
  pid_t pid = fork();
  if (pid == 0) {
    std::string mark = std::string(kWorkerMarkVariable) + "=" + mark_value;
    char* env[] = {mark.data(), nullptr};
    char* argv[] = {const_cast<char*>("/bin/sleep"), const_cast<char*>("30"), nullptr};
    execve("/bin/sleep", argv, env);
    _exit(127);
  }
  return pid;
}

TEST(LeftoversTest, KillsOnlyProcessesMarkedWithThisWorkDir) {
  pid_t mine = StartSleeper("/tmp/torus-test-work-a");
  pid_t other = StartSleeper("/tmp/torus-test-work-b");
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // let both exec
  EXPECT_EQ(KillLeftoverWorkers("/tmp/torus-test-work-a"), 1);
  int status = 0;
  ASSERT_EQ(waitpid(mine, &status, 0), mine);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  EXPECT_EQ(waitpid(other, &status, WNOHANG), 0) << "a process of another work dir was killed";
  kill(other, SIGKILL);
  waitpid(other, &status, 0);
  EXPECT_EQ(KillLeftoverWorkers("/tmp/torus-test-work-a"), 0);
}

}  // namespace leftovers_test
}  // namespace torus::node
