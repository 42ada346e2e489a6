// `tide token create|ls|revoke|rotate`: a user's own API tokens. The
// secret is printed once, on stdout; everything else goes to stderr or the
// table. `tide token ls` never shows a secret.
#include <iostream>

#include "cli/common.h"

namespace tide::cli {

namespace {

struct CreateOptions {
  std::string name;
  std::string scope = "full";
  std::string expires = "never";
  OutputFormat format = OutputFormat::kTable;
};

int RunCreate(const CreateOptions& o) {
  auto client = NewClient();
  if (!client.ok()) return PrintError(client.status());
  json body = {{"name", o.name}, {"scope", o.scope}, {"expires", o.expires}};
  auto made = (*client)->Call("POST", "/v1/tokens", body);
  if (!made.ok()) return PrintError(made.status());
  if (o.format == OutputFormat::kJson) {
    PrintJson(*made);
    return kExitOk;
  }
  std::cerr << "Token " << JsonString(*made, "name") << " (" << JsonString(*made, "id")
            << "), scope " << JsonString(*made, "scope") << ", expires "
            << (JsonInt(*made, "expires_at") == 0
                    ? std::string("never")
                    : FormatTimestamp(NowMs(), JsonInt(*made, "expires_at")))
            << ". Its secret, shown once:\n";
  std::cout << JsonString(*made, "token") << std::endl;
  return kExitOk;
}

int RunList(OutputFormat format) {
  auto client = NewClient();
  if (!client.ok()) return PrintError(client.status());
  auto answer = (*client)->Call("GET", "/v1/tokens");
  if (!answer.ok()) return PrintError(answer.status());
  json tokens = answer->value("tokens", json::array());
  if (format == OutputFormat::kJson) {
    PrintJson(tokens);
    return kExitOk;
  }
  int64_t now = NowMs();
  Table table({"NAME", "ID", "SCOPE", "CREATED", "LAST USED", "EXPIRES"});
  for (const auto& t : tokens) {
    int64_t used = JsonInt(t, "last_used_at"), expires = JsonInt(t, "expires_at");
    std::string name = JsonString(t, "name");
    if (t.value("current", false)) name += " (this one)";
    table.AddRow({name, JsonString(t, "id"), JsonString(t, "scope"),
                  FormatAge(now, JsonInt(t, "created_at")) + " ago",
                  used > 0 ? FormatAge(now, used) + " ago" : "never",
                  expires == 0 ? "never" : "in " + FormatAge(expires, now)});
  }
  std::cout << table.ToString();
  return kExitOk;
}

// The console sessions logged in with your tokens (st-…): `tide token
// revoke st-…` ends one.
int RunSessions(OutputFormat format) {
  auto client = NewClient();
  if (!client.ok()) return PrintError(client.status());
  auto answer = (*client)->Call("GET", "/v1/sessions");
  if (!answer.ok()) return PrintError(answer.status());
  json sessions = answer->value("sessions", json::array());
  if (format == OutputFormat::kJson) {
    PrintJson(sessions);
    return kExitOk;
  }
  int64_t now = NowMs();
  Table table({"ID", "FROM TOKEN", "SCOPE", "LOGGED IN", "LAST USED", "ENDS"});
  for (const auto& t : sessions) {
    int64_t used = JsonInt(t, "last_used_at");
    table.AddRow({JsonString(t, "id"), JsonString(t, "token"), JsonString(t, "scope"),
                  FormatAge(now, JsonInt(t, "created_at")) + " ago",
                  used > 0 ? FormatAge(now, used) + " ago" : "never",
                  "in " + FormatAge(JsonInt(t, "expires_at"), now)});
  }
  std::cout << table.ToString();
  if (sessions.empty()) std::cout << "No console sessions: nobody is logged in with your tokens.\n";
  return kExitOk;
}

int RunRevoke(const std::string& which) {
  auto client = NewClient();
  if (!client.ok()) return PrintError(client.status());
  // A session's id: "st-" and 12 hex digits (a token's name is looked up
  // as a token).
  const bool session = which.size() == 15 && which.rfind("st-", 0) == 0 &&
                       which.find_first_not_of("0123456789abcdef", 3) == std::string::npos;
  if (session) {
    auto ended = (*client)->Call("DELETE", "/v1/sessions/" + which);
    if (!ended.ok()) return PrintError(ended.status());
    std::cout << "Session " << which << " ended: that browser is logged out.\n";
    return kExitOk;
  }
  auto answer = (*client)->Call("DELETE", "/v1/tokens/" + which);
  if (!answer.ok()) return PrintError(answer.status());
  std::cout << "Token " << which << " revoked: the next request with it is refused (401).\n";
  return kExitOk;
}

int RunRotate(const std::string& which, const std::string& grace, OutputFormat format) {
  auto client = NewClient();
  if (!client.ok()) return PrintError(client.status());
  auto made = (*client)->Call("POST", "/v1/tokens/" + which + "/rotate", json{{"grace", grace}});
  if (!made.ok()) return PrintError(made.status());
  if (format == OutputFormat::kJson) {
    PrintJson(*made);
    return kExitOk;
  }
  int64_t now = NowMs();
  int64_t old_until = JsonInt(*made, "old_expires_at");
  std::cerr << "Token " << JsonString(*made, "name") << " rotated: the old secret "
            << (old_until <= now ? std::string("no longer works")
                                 : "works until " + FormatTimestamp(now, old_until))
            << ". The new one (" << JsonString(*made, "id") << "), shown once:\n";
  std::cout << JsonString(*made, "token") << std::endl;
  return kExitOk;
}

}  // namespace

void AddTokenCommands(CLI::App& app) {
  CLI::App* token = app.add_subcommand("token", "Your API tokens: create, list, revoke, rotate");
  token->require_subcommand(1);

  auto c = std::make_shared<CreateOptions>();
  CLI::App* create = token->add_subcommand("create", "Make a token and print its secret once");
  create->add_option("--name", c->name, "What you call it (unique among your tokens), e.g. ci")
      ->required();
  create->add_option("--scope", c->scope,
                     "read (look only), submit (read, and submit and cancel jobs and batches) "
                     "or full (everything you may)")
      ->capture_default_str();
  create->add_option("--expires", c->expires, "Lifetime, e.g. 30d or 12h, or never")
      ->capture_default_str();
  AddOutputFlag(create, &c->format);
  SetAction(create, [c] { return RunCreate(*c); });

  auto ls_format = std::make_shared<OutputFormat>(OutputFormat::kTable);
  CLI::App* ls = token->add_subcommand("ls", "List your tokens (never their secrets)");
  AddOutputFlag(ls, ls_format.get());
  SetAction(ls, [ls_format] { return RunList(*ls_format); });

  auto sessions_format = std::make_shared<OutputFormat>(OutputFormat::kTable);
  CLI::App* sessions = token->add_subcommand(
      "sessions", "List the console sessions logged in with your tokens");
  AddOutputFlag(sessions, sessions_format.get());
  SetAction(sessions, [sessions_format] { return RunSessions(*sessions_format); });

  auto revoke_which = std::make_shared<std::string>();
  CLI::App* revoke = token->add_subcommand(
      "revoke", "Revoke a token at once (or end a console session: its st- id)");
  revoke->add_option("token", *revoke_which,
                     "Its name or id (tide token ls), or a session's id (tide token sessions)")
      ->required();
  SetAction(revoke, [revoke_which] { return RunRevoke(*revoke_which); });

  auto rotate_which = std::make_shared<std::string>("main");
  auto grace = std::make_shared<std::string>("0");
  auto rotate_format = std::make_shared<OutputFormat>(OutputFormat::kTable);
  CLI::App* rotate = token->add_subcommand(
      "rotate", "Replace a token by a new one of the same name and scope");
  rotate->add_option("token", *rotate_which, "Its name or id")->capture_default_str();
  rotate->add_option("--grace", *grace,
                     "How long the old secret keeps working, e.g. 1h (0: not at all)")
      ->capture_default_str();
  AddOutputFlag(rotate, rotate_format.get());
  SetAction(rotate, [rotate_which, grace, rotate_format] {
    return RunRotate(*rotate_which, *grace, *rotate_format);
  });
}

}  // namespace tide::cli
