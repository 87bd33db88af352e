#include "pararnn/reports/process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "pararnn/core/errors.hpp"

extern char** environ;

namespace pararnn::reports {
namespace {

struct Pipe {
  int fds[2] = {-1, -1};
  Pipe() {
    if (::pipe2(fds, O_CLOEXEC) != 0) throw Error(fmt::format("cannot create a pipe ({})", std::strerror(errno)));
  }
  ~Pipe() {
    for (int& fd : fds)
      if (fd >= 0) ::close(fd);
  }
  void close_end(int i) {
    if (fds[i] >= 0) ::close(fds[i]);
    fds[i] = -1;
  }
};

}  // namespace

ProcessResult run_process(const std::vector<std::string>& argv, std::ostream* out,
                          const std::filesystem::path& cwd) {
  if (argv.empty()) throw Error("run_process: empty argv");
  Pipe out_pipe, err_pipe;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out_pipe.fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err_pipe.fds[1], STDERR_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  if (!cwd.empty()) posix_spawn_file_actions_addchdir_np(&actions, cwd.c_str());
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, argv[0].c_str(), &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  out_pipe.close_end(1);
  err_pipe.close_end(1);
  ProcessResult result;
  if (rc != 0) {
    result.exit_code = 127;
    result.stderr_text = fmt::format("cannot start {}: {}", argv[0], std::strerror(rc));
    return result;
  }
  std::array<pollfd, 2> fds = {pollfd{out_pipe.fds[0], POLLIN, 0}, pollfd{err_pipe.fds[0], POLLIN, 0}};
  std::array<char, 65536> buffer;
  int open_fds = 2;
  while (open_fds > 0) {
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const ssize_t n = ::read(fds[i].fd, buffer.data(), buffer.size());
      if (n > 0) {
        if (i == 0 && out) out->write(buffer.data(), n);
        if (i == 1 && result.stderr_text.size() < 65536) result.stderr_text.append(buffer.data(), static_cast<std::size_t>(n));
      } else if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) {
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  return result;
}

bool program_in_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  if (!path) return false;
  std::string_view rest(path);
  while (true) {
    const auto colon = rest.find(':');
    const std::string dir(rest.substr(0, colon));
    const std::filesystem::path candidate = std::filesystem::path(dir.empty() ? "." : dir) / program;
    if (::access(candidate.c_str(), X_OK) == 0 && !std::filesystem::is_directory(candidate)) return true;
    if (colon == std::string_view::npos) return false;
    rest.remove_prefix(colon + 1);
  }
}

ScratchDirectory::ScratchDirectory(const std::filesystem::path& parent, const std::string& prefix) {
  std::string pattern = (parent / (prefix + "XXXXXX")).string();
  if (::mkdtemp(pattern.data()) == nullptr)
    throw Error(fmt::format("cannot create a scratch directory {} ({})", pattern, std::strerror(errno)));
  path_ = pattern;
}

ScratchDirectory::~ScratchDirectory() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

}  // namespace pararnn::reports
