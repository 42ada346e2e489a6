// `tide admin ...`: operator commands; they need an admin token
// (TIDE_ADMIN_TOKEN, TIDE_TOKEN, or ./.tide/server/admin.token).
//
//   tide admin user add NAME   creates a user and prints its API token
//   tide admin join-token      creates a join token for `tide agent`
//   tide admin node drain NODE    the node takes no new jobs (running ones go on)
//   tide admin node undrain NODE  it takes new jobs again
//
// Secrets go alone on stdout (so `TOKEN=$(tide admin user add ada)` works);
// what was created is said on stderr. -o json prints {"id", "token", ...}.
#include <iostream>

#include "cli/common.h"

namespace tide::cli {

namespace {

int PrintAdminError(const Status& status) {
  int code = PrintError(status);
  if (status.code() == Code::kPermissionDenied || status.code() == Code::kUnauthenticated) {
    std::cerr << "hint: admin commands need the admin token: set TIDE_ADMIN_TOKEN (a server "
                 "keeps it in DATA_DIR/admin.token; `tide dev` in .tide/server/admin.token).\n";
  }
  return code;
}

struct UserAddOptions {
  std::string name;
  OutputFormat format = OutputFormat::kTable;
};

int RunUserAdd(const UserAddOptions& opts) {
  auto client = NewClient(/*admin=*/true);
  if (!client.ok()) return PrintError(client.status());
  auto user = (*client)->CreateUser(opts.name);
  if (!user.ok()) return PrintAdminError(user.status());
  if (opts.format == OutputFormat::kJson) {
    PrintJson({{"id", user->id}, {"name", opts.name}, {"token", user->token}});
    return kExitOk;
  }
  std::cerr << "Created user " << opts.name << " (" << user->id
            << "). Its API token, shown once:\n";
  std::cout << user->token << std::endl;
  return kExitOk;
}

int RunJoinToken(OutputFormat format) {
  auto client = NewClient(/*admin=*/true);
  if (!client.ok()) return PrintError(client.status());
  auto token = (*client)->CreateJoinToken();
  if (!token.ok()) return PrintAdminError(token.status());
  if (format == OutputFormat::kJson) {
    PrintJson({{"id", token->id}, {"token", token->token}});
    return kExitOk;
  }
  std::cerr << "Join token (" << token->id << "); on a GPU machine run:\n  tide agent --server "
            << ConnectionFromEnv(true).server << " --join-token TOKEN\n";
  std::cout << token->token << std::endl;
  return kExitOk;
}

int RunDrain(const std::string& node, bool drain) {
  auto client = NewClient(/*admin=*/true);
  if (!client.ok()) return PrintError(client.status());
  auto answer = (*client)->Call("POST", "/v1/admin/nodes/" + node + (drain ? "/drain" : "/undrain"));
  if (!answer.ok()) return PrintAdminError(answer.status());
  std::cout << "Node " << JsonString(*answer, "name") << " ("
            << JsonString(*answer, "id") << ") "
            << (drain ? "is draining: it keeps its running jobs and takes no new ones.\n"
                      : "takes new jobs again.\n");
  return kExitOk;
}

}  // namespace

void AddAdminCommands(CLI::App& app) {
  CLI::App* admin = app.add_subcommand("admin", "Operator commands (need an admin token)");
  admin->require_subcommand(1);

  CLI::App* user = admin->add_subcommand("user", "Manage users");
  user->require_subcommand(1);
  auto add_opts = std::make_shared<UserAddOptions>();
  CLI::App* add = user->add_subcommand("add", "Create a user and print its API token");
  add->add_option("name", add_opts->name, "User name")->required();
  AddOutputFlag(add, &add_opts->format);
  SetAction(add, [add_opts] { return RunUserAdd(*add_opts); });

  auto join_format = std::make_shared<OutputFormat>(OutputFormat::kTable);
  CLI::App* join = admin->add_subcommand("join-token", "Create a join token for a new agent");
  AddOutputFlag(join, join_format.get());
  SetAction(join, [join_format] { return RunJoinToken(*join_format); });

  CLI::App* node = admin->add_subcommand("node", "Drain or reopen a node");
  node->require_subcommand(1);
  for (bool drain : {true, false}) {
    auto name = std::make_shared<std::string>();
    CLI::App* c = node->add_subcommand(drain ? "drain" : "undrain",
                                       drain ? "Stop placing new jobs on a node (running ones go on)"
                                             : "Let a drained node take new jobs again");
    c->add_option("node", *name, "Node name or id")->required();
    SetAction(c, [name, drain] { return RunDrain(*name, drain); });
  }
}

}  // namespace tide::cli
