// `tide admin ...`: operator commands; they need an admin token
// (TIDE_ADMIN_TOKEN, TIDE_TOKEN, or ./.tide/server/admin.token).
//
//   tide admin user add NAME   creates a user and prints its API token
//   tide admin join-token [--provider USER] [--expires 24h]
//                              creates a join token for `tide agent` and
//                              prints the command to paste; the provider
//                              earns what its nodes' jobs pay, and is
//                              created (its token printed) if no such user
//                              exists
//   tide admin join-token ls | revoke ID   the tokens that still work; revoke one
//   tide admin audit [--since 7d] [-o json]  who did what, when, from where
//   tide admin token ls [--user U] | revoke ID   users' tokens; revoke a leaked one
//   tide admin prices set MODEL=CREDITS ... [--spot-discount F] [--fee F]
//   tide admin prices show     the price list (credits per GPU-hour)
//   tide admin cards mint --count N --value V [--expires DATE]
//                              prints N new compute card codes, once
//   tide admin ledger check    proves every account sums to what was issued
//   tide admin user weight NAME W   fair-share weight (default 1)
//   tide admin user cap NAME --daily CREDITS|none
//                              what NAME's jobs may spend per UTC day
//   tide admin node drain NODE [--evict]  the node takes no new jobs (with --evict its
//                                 running jobs are stopped and resume elsewhere)
//   tide admin node undrain NODE  it takes new jobs again
//   tide admin node revoke NODE   its credentials stop working; its jobs run elsewhere
//
// Secrets go alone on stdout (so `TOKEN=$(tide admin user add ada)` works);
// what was created is said on stderr. -o json prints {"id", "token", ...}.
#include <ctime>
#include <iostream>

#include "cli/common.h"
#include "common/clock.h"

namespace tide::cli {

namespace {

int PrintAdminError(const Status& status) {
  int code = PrintError(status);
  if (status.code() == Code::kPermissionDenied || status.code() == Code::kUnauthenticated) {
    std::cerr << "hint: admin commands need the admin token: set TIDE_ADMIN_TOKEN (or "
                 "TIDE_TOKEN) to it; a server keeps it in DATA_DIR/admin.token, `tide dev` in "
                 ".tide/server/admin.token.\n";
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

int RunJoinToken(OutputFormat format, const std::string& provider, const std::string& expires) {
  auto client = NewClient(/*admin=*/true);
  if (!client.ok()) return PrintError(client.status());
  auto token = (*client)->CreateJoinToken(provider, /*create_provider=*/!provider.empty(), expires);
  if (!token.ok()) return PrintAdminError(token.status());
  if (format == OutputFormat::kJson) {
    json out = {{"id", token->id}, {"token", token->token}};
    if (!provider.empty()) out["provider_id"] = token->provider_id;
    if (!token->provider_token.empty()) out["provider_token"] = token->provider_token;
    if (!token->pins.empty()) out["pins"] = token->pins;
    PrintJson(out);
    return kExitOk;
  }
  if (!token->provider_token.empty()) {
    std::cerr << "Created provider account " << provider << " (" << token->provider_id
              << "); its API token, for tide provider earnings, shown once:\n  "
              << token->provider_token << "\n";
  }
  std::cerr << "Join token " << token->id;
  if (!provider.empty()) std::cerr << " for provider " << provider;
  std::cerr << ". On a GPU machine run:\n  tide agent --server " << ConnectionFromEnv(true).server
            << " --join-token " << token->token << "\n";
  if (!token->pins.empty()) {
    std::cerr << "The token carries the server's certificate pin";
    if (token->pins.size() > 1) std::cerr << "s";
    for (const auto& pin : token->pins) std::cerr << " " << pin;
    std::cerr << ": the agent trusts this server's key and no other, with no CA.\n";
  }
  std::cout << token->token << std::endl;
  return kExitOk;
}

int RunJoinTokenList(OutputFormat format) {
  auto client = NewClient(/*admin=*/true);
  if (!client.ok()) return PrintError(client.status());
  auto answer = (*client)->Call("GET", "/v1/admin/join-tokens");
  if (!answer.ok()) return PrintAdminError(answer.status());
  json tokens = answer->value("join_tokens", json::array());
  if (format == OutputFormat::kJson) {
    PrintJson(tokens);
    return kExitOk;
  }
  int64_t now = NowMs();
  Table table({"ID", "PROVIDER", "CREATED", "LAST USED", "EXPIRES"});
  for (const auto& t : tokens) {
    int64_t used = JsonInt(t, "last_used_at"), expires = JsonInt(t, "expires_at");
    std::string provider = JsonString(t, "provider_id");
    table.AddRow({JsonString(t, "id"), provider.empty() ? "(operator)" : provider,
                  FormatAge(now, JsonInt(t, "created_at")) + " ago",
                  used > 0 ? FormatAge(now, used) + " ago" : "never",
                  expires == 0 ? "never" : "in " + FormatAge(expires, now)});
  }
  std::cout << table.ToString();
  return kExitOk;
}

int RunJoinTokenRevoke(const std::string& id) {
  auto client = NewClient(/*admin=*/true);
  if (!client.ok()) return PrintError(client.status());
  auto answer = (*client)->Call("DELETE", "/v1/admin/join-tokens/" + id);
  if (!answer.ok()) return PrintAdminError(answer.status());
  std::cout << "Join token " << id << " revoked: no agent joins with it (agents that joined keep "
            << "their own credentials; tide admin node revoke NODE stops one).\n";
  return kExitOk;
}

int RunNodeRevoke(const std::string& node) {
  auto client = NewClient(/*admin=*/true);
  if (!client.ok()) return PrintError(client.status());
  auto answer = (*client)->Call("POST", "/v1/admin/nodes/" + node + "/revoke");
  if (!answer.ok()) return PrintAdminError(answer.status());
  std::cout << "Node " << JsonString(*answer, "name") << " (" << JsonString(*answer, "id")
            << ") revoked: its token no longer works, and its jobs run elsewhere (node_revoked).\n";
  return kExitOk;
}

int RunDrain(const std::string& node, bool drain, bool evict) {
  auto client = NewClient(/*admin=*/true);
  if (!client.ok()) return PrintError(client.status());
  auto answer = (*client)->Call("POST", "/v1/admin/nodes/" + node +
                                            (drain ? (evict ? "/drain?evict=true" : "/drain")
                                                   : "/undrain"));
  if (!answer.ok()) return PrintAdminError(answer.status());
  std::cout << "Node " << JsonString(*answer, "name") << " ("
            << JsonString(*answer, "id") << ") "
            << (!drain ? "takes new jobs again.\n"
                : evict ? "is draining: its jobs got the notice (node_draining) and will "
                          "resume elsewhere.\n"
                        : "is draining: it keeps its running jobs and takes no new ones.\n");
  return kExitOk;
}

int RunUserTokenList(OutputFormat format, const std::string& user) {
  auto client = NewClient(/*admin=*/true);
  if (!client.ok()) return PrintError(client.status());
  auto answer = (*client)->Call("GET", "/v1/admin/tokens" + (user.empty() ? "" : "?user=" + user));
  if (!answer.ok()) return PrintAdminError(answer.status());
  json tokens = answer->value("tokens", json::array());
  if (format == OutputFormat::kJson) {
    PrintJson(tokens);
    return kExitOk;
  }
  int64_t now = NowMs();
  Table table({"ID", "USER", "NAME", "SCOPE", "CREATED", "LAST USED", "EXPIRES"});
  for (const auto& t : tokens) {
    int64_t used = JsonInt(t, "last_used_at"), expires = JsonInt(t, "expires_at");
    table.AddRow({JsonString(t, "id"), JsonString(t, "user_id"), JsonString(t, "name"),
                  JsonString(t, "scope"), FormatAge(now, JsonInt(t, "created_at")) + " ago",
                  used > 0 ? FormatAge(now, used) + " ago" : "never",
                  expires == 0 ? "never" : "in " + FormatAge(expires, now)});
  }
  std::cout << table.ToString();
  return kExitOk;
}

int RunUserTokenRevoke(const std::string& id) {
  auto client = NewClient(/*admin=*/true);
  if (!client.ok()) return PrintError(client.status());
  auto answer = (*client)->Call("DELETE", "/v1/admin/tokens/" + id);
  if (!answer.ok()) return PrintAdminError(answer.status());
  std::cout << "Token " << id << " revoked: the next request with it is refused.\n";
  return kExitOk;
}

// One line per entry, oldest first; the detail as compact JSON.
int RunAudit(OutputFormat format, const std::string& since_text, int limit) {
  int64_t since = 0;
  if (!since_text.empty()) {
    auto s = ParseSince(since_text, NowMs());
    if (!s.ok()) return PrintError(s.status());
    since = *s;
  }
  auto client = NewClient(/*admin=*/true);
  if (!client.ok()) return PrintError(client.status());
  auto answer = (*client)->Call("GET", "/v1/admin/audit?since=" + std::to_string(since) +
                                           "&limit=" + std::to_string(limit));
  if (!answer.ok()) return PrintAdminError(answer.status());
  json entries = answer->value("entries", json::array());
  if (format == OutputFormat::kJson) {
    PrintJson(entries);
    return kExitOk;
  }
  Table table({"TIME", "ACTOR", "TOKEN", "ADDRESS", "ACTION", "TARGET", "DETAIL"});
  for (const auto& e : entries) {
    std::string address = JsonString(e, "address");
    std::string token = JsonString(e, "token");
    std::string target = JsonString(e, "target");
    json detail = e.value("detail", json::object());
    table.AddRow({FormatTime(JsonInt(e, "at")), JsonString(e, "actor"), token.empty() ? "-" : token,
                  address.empty() ? "-" : address, JsonString(e, "action"),
                  target.empty() ? "-" : target, detail.empty() ? "-" : detail.dump()});
  }
  std::cout << table.ToString();
  return kExitOk;
}

void PrintPrices(const json& p) {
  Table t({"GPU MODEL", "CREDITS/GPU-H"});
  if (p.contains("per_gpu_hour") && p["per_gpu_hour"].is_object()) {
    for (const auto& [model, v] : p["per_gpu_hour"].items()) {
      t.AddRow({model, CreditsText(p["per_gpu_hour"], model.c_str())});
    }
  }
  std::cout << t.ToString() << "Spot discount " << p.value("spot_discount", 0.0) << ", platform fee "
            << p.value("fee", 0.0) << "\n";
}

struct PricesOptions {
  std::vector<std::string> prices;  // MODEL=CREDITS
  std::string spot_discount;
  std::string fee;
  OutputFormat format = OutputFormat::kTable;
};

int RunPricesSet(const PricesOptions& opts) {
  json body = json::object();
  json list = json::object();
  for (const auto& p : opts.prices) {
    auto eq = p.find('=');
    if (eq == std::string::npos || eq == 0) {
      return PrintError(Status::InvalidArgument("\"" + p + "\" is not MODEL=CREDITS_PER_GPU_HOUR",
                                                "prices"));
    }
    list[p.substr(0, eq)] = p.substr(eq + 1);
  }
  if (!list.empty()) body["per_gpu_hour"] = list;
  if (!opts.spot_discount.empty()) body["spot_discount"] = opts.spot_discount;
  if (!opts.fee.empty()) body["fee"] = opts.fee;
  auto client = NewClient(/*admin=*/true);
  if (!client.ok()) return PrintError(client.status());
  auto answer = (*client)->Call("POST", "/v1/admin/prices", body);
  if (!answer.ok()) return PrintAdminError(answer.status());
  if (opts.format == OutputFormat::kJson) PrintJson(*answer);
  else PrintPrices(*answer);
  return kExitOk;
}

int RunPricesShow(OutputFormat format) {
  auto client = NewClient(/*admin=*/true);
  if (!client.ok()) return PrintError(client.status());
  auto answer = (*client)->Call("GET", "/v1/admin/prices");
  if (!answer.ok()) return PrintAdminError(answer.status());
  if (format == OutputFormat::kJson) PrintJson(*answer);
  else PrintPrices(*answer);
  return kExitOk;
}

struct MintOptions {
  int count = 1;
  std::string value;
  std::string expires;  // YYYY-MM-DD
  OutputFormat format = OutputFormat::kTable;
};

int RunMint(const MintOptions& opts) {
  json body = {{"count", opts.count}, {"value", opts.value}};
  if (!opts.expires.empty()) {
    std::tm tm{};
    if (opts.expires.size() != 10 || strptime(opts.expires.c_str(), "%Y-%m-%d", &tm) == nullptr) {
      return PrintError(Status::InvalidArgument("must be a date like 2027-01-31", "expires"));
    }
    body["expires_at"] = static_cast<int64_t>(timegm(&tm)) * 1000;
  }
  auto client = NewClient(/*admin=*/true);
  if (!client.ok()) return PrintError(client.status());
  auto answer = (*client)->Call("POST", "/v1/admin/cards", body);
  if (!answer.ok()) return PrintAdminError(answer.status());
  if (opts.format == OutputFormat::kJson) {
    PrintJson((*answer)["codes"]);
    return kExitOk;
  }
  std::cerr << "Minted " << (*answer)["codes"].size() << " cards of "
            << CreditsText(*answer, "value") << " credits. The codes, shown once:\n";
  for (const auto& c : (*answer)["codes"]) std::cout << c.get<std::string>() << "\n";
  return kExitOk;
}

int RunLedgerCheck(OutputFormat format) {
  auto client = NewClient(/*admin=*/true);
  if (!client.ok()) return PrintError(client.status());
  auto answer = (*client)->Call("GET", "/v1/admin/ledger/check");
  if (!answer.ok()) return PrintAdminError(answer.status());
  bool ok = answer->value("ok", false);
  if (format == OutputFormat::kJson) {
    PrintJson(*answer);
  } else {
    std::cout << (ok ? "The ledger balances.\n" : "THE LEDGER DOES NOT BALANCE: " +
                                                       JsonString(*answer, "error") + "\n")
              << "Issued      " << CreditsText(*answer, "issued") << "\n"
              << "Users       " << CreditsText(*answer, "users") << "\n"
              << "Escrow      " << CreditsText(*answer, "escrow") << "\n"
              << "Providers   " << CreditsText(*answer, "providers") << "\n"
              << "Platform    " << CreditsText(*answer, "platform") << "\n";
  }
  return ok ? kExitOk : kExitError;
}

int RunUserCap(const std::string& user, const std::string& daily) {
  json body = json::object();
  if (daily != "none") body["daily_cap"] = daily;
  auto client = NewClient(/*admin=*/true);
  if (!client.ok()) return PrintError(client.status());
  auto answer = (*client)->Call("PUT", "/v1/admin/users/" + user + "/daily-cap", body);
  if (!answer.ok()) return PrintAdminError(answer.status());
  std::cout << "User " << user << ": "
            << ((*answer)["daily_cap"].is_null() ? std::string("no daily cap")
                                                 : "at most " + CreditsText(*answer, "daily_cap") +
                                                       " credits per UTC day")
            << "\n";
  return kExitOk;
}

int RunUserWeight(const std::string& user, double weight) {
  auto client = NewClient(/*admin=*/true);
  if (!client.ok()) return PrintError(client.status());
  auto answer =
      (*client)->Call("PUT", "/v1/admin/users/" + user + "/weight", json{{"weight", weight}});
  if (!answer.ok()) return PrintAdminError(answer.status());
  std::cout << "User " << user << ": fair-share weight " << answer->value("weight", 1.0) << "\n";
  return kExitOk;
}

// Like Slurm's sshare: each user's weight, share, decayed usage and place
// in the fair-share order, with the money they hold.
int RunUserList(OutputFormat format) {
  auto client = NewClient(/*admin=*/true);
  if (!client.ok()) return PrintError(client.status());
  auto answer = (*client)->Call("GET", "/v1/admin/users");
  if (!answer.ok()) return PrintAdminError(answer.status());
  if (format == OutputFormat::kJson) {
    PrintJson(*answer);
    return kExitOk;
  }
  auto fixed = [](double v, int digits) {
    char buf[64];
    snprintf(buf, sizeof buf, "%.*f", digits, v);
    return std::string(buf);
  };
  auto pct = [&](double v) { return fixed(100 * v, 1) + "%"; };
  Table table({"NAME", "ID", "WEIGHT", "SHARE", "USAGE_GPU_H", "USAGE", "RUNNING", "QUEUED",
               "NEXT", "BALANCE", "DAILY_CAP"});
  for (const json& u : (*answer)["users"]) {
    table.AddRow({u.value("name", ""), u.value("id", ""), JsonText(u["weight"]),
                  pct(u.value("share", 0.0)), fixed(u.value("usage_gpu_s", 0.0) / 3600, 2),
                  pct(u.value("usage_share", 0.0)),
                  std::to_string(u.value("running_jobs", 0)) + " (" +
                      std::to_string(u.value("running_gpus", 0)) + " GPUs)",
                  std::to_string(u.value("queued_jobs", 0)) + " (" +
                      std::to_string(u.value("queued_gpus", 0)) + " GPUs)",
                  u["rank"].is_null() ? "-" : JsonText(u["rank"]), CreditsText(u, "balance"),
                  u["daily_cap"].is_null() ? "none" : CreditsText(u, "daily_cap")});
  }
  std::cout << table.ToString();
  const double half_life_h = static_cast<double>((*answer).value("half_life_s", int64_t{0})) / 3600;
  std::cout << "Usage decays with a half-life of "
            << (half_life_h >= 48 ? fixed(half_life_h / 24, 1) + " days" : fixed(half_life_h, 1) + " hours")
            << "; NEXT orders users with queued work by score, as the scheduler does between "
               "jobs of equal tier and service level.\n";
  return kExitOk;
}

void AddAdminMoneyCommands(CLI::App* admin, CLI::App* user) {
  auto ls_format = std::make_shared<OutputFormat>(OutputFormat::kTable);
  CLI::App* ls = user->add_subcommand(
      "ls", "Every user's fair-share standing (weight, share, usage, who is served next) and balance");
  AddOutputFlag(ls, ls_format.get());
  SetAction(ls, [ls_format] { return RunUserList(*ls_format); });

  auto w_user = std::make_shared<std::string>();
  auto w_value = std::make_shared<double>(1.0);
  CLI::App* weight = user->add_subcommand("weight", "Set a user's fair-share weight (default 1)");
  weight->add_option("name", *w_user, "User name or id")->required();
  weight->add_option("weight", *w_value, "Weight, above 0 (2 = twice the share of 1)")->required();
  SetAction(weight, [w_user, w_value] { return RunUserWeight(*w_user, *w_value); });

  auto cap_user = std::make_shared<std::string>();
  auto cap_daily = std::make_shared<std::string>();
  CLI::App* cap = user->add_subcommand("cap", "Limit what a user's jobs may spend per day");
  cap->add_option("name", *cap_user, "User name or id")->required();
  cap->add_option("--daily", *cap_daily, "Credits per UTC day, or none")->required();
  SetAction(cap, [cap_user, cap_daily] { return RunUserCap(*cap_user, *cap_daily); });

  CLI::App* prices = admin->add_subcommand("prices", "The price list, spot discount and fee");
  prices->require_subcommand(1);
  auto popts = std::make_shared<PricesOptions>();
  CLI::App* set = prices->add_subcommand("set", "Set prices: MODEL=CREDITS_PER_GPU_HOUR ...");
  set->add_option("prices", popts->prices, "e.g. RTX4090=0.4 H100=2.5");
  set->add_option("--spot-discount", popts->spot_discount, "Fraction off for spot jobs, e.g. 0.6");
  set->add_option("--fee", popts->fee, "Platform fee, a fraction of every charge, e.g. 0.1");
  AddOutputFlag(set, &popts->format);
  SetAction(set, [popts] { return RunPricesSet(*popts); });
  auto show_format = std::make_shared<OutputFormat>(OutputFormat::kTable);
  CLI::App* show = prices->add_subcommand("show", "Print the price list");
  AddOutputFlag(show, show_format.get());
  SetAction(show, [show_format] { return RunPricesShow(*show_format); });

  CLI::App* cards = admin->add_subcommand("cards", "Compute cards (prepaid credit)");
  cards->require_subcommand(1);
  auto mopts = std::make_shared<MintOptions>();
  CLI::App* mint = cards->add_subcommand("mint", "Print new card codes, once");
  mint->add_option("--count", mopts->count, "How many")->check(CLI::Range(1, 10000))->capture_default_str();
  mint->add_option("--value", mopts->value, "Credits on each card, e.g. 25")->required();
  mint->add_option("--expires", mopts->expires, "Last day (UTC), e.g. 2027-01-31");
  AddOutputFlag(mint, &mopts->format);
  SetAction(mint, [mopts] { return RunMint(*mopts); });

  CLI::App* ledger = admin->add_subcommand("ledger", "The ledger");
  ledger->require_subcommand(1);
  auto lformat = std::make_shared<OutputFormat>(OutputFormat::kTable);
  CLI::App* check = ledger->add_subcommand("check", "Prove that all accounts sum to what was issued");
  AddOutputFlag(check, lformat.get());
  SetAction(check, [lformat] { return RunLedgerCheck(*lformat); });
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
  auto provider = std::make_shared<std::string>();
  auto expires = std::make_shared<std::string>("24h");
  CLI::App* join = admin->add_subcommand(
      "join-token", "Create a join token for a new agent (ls, revoke: the ones not expired)");
  join->add_option("--provider", *provider,
                   "User who owns the agents that join with it and earns what they run "
                   "(created if no such user exists)");
  join->add_option("--expires", *expires, "How long it may be used to join, e.g. 24h, 7d, or never")
      ->capture_default_str();
  AddOutputFlag(join, join_format.get());
  SetAction(join, [join_format, provider, expires] {
    return RunJoinToken(*join_format, *provider, *expires);
  });
  auto jls_format = std::make_shared<OutputFormat>(OutputFormat::kTable);
  CLI::App* jls = join->add_subcommand("ls", "List the join tokens that still work");
  AddOutputFlag(jls, jls_format.get());
  SetAction(jls, [jls_format] { return RunJoinTokenList(*jls_format); });
  auto jrevoke_id = std::make_shared<std::string>();
  CLI::App* jrevoke = join->add_subcommand("revoke", "Revoke a join token: no agent joins with it");
  jrevoke->add_option("id", *jrevoke_id, "Its id (jt-…, as tide admin join-token ls shows)")
      ->required();
  SetAction(jrevoke, [jrevoke_id] { return RunJoinTokenRevoke(*jrevoke_id); });

  AddAdminMoneyCommands(admin, user);

  CLI::App* token = admin->add_subcommand("token", "Users' tokens: list them, revoke a leaked one");
  token->require_subcommand(1);
  auto tls_format = std::make_shared<OutputFormat>(OutputFormat::kTable);
  auto tls_user = std::make_shared<std::string>();
  CLI::App* tls = token->add_subcommand("ls", "List users' tokens that still work (never a secret)");
  tls->add_option("--user", *tls_user, "Only this user's (name or id)");
  AddOutputFlag(tls, tls_format.get());
  SetAction(tls, [tls_format, tls_user] { return RunUserTokenList(*tls_format, *tls_user); });
  auto trevoke_id = std::make_shared<std::string>();
  CLI::App* trevoke = token->add_subcommand("revoke", "Revoke a user's token: refused at once");
  trevoke->add_option("id", *trevoke_id, "Its id (ut-…, as tide admin token ls shows)")->required();
  SetAction(trevoke, [trevoke_id] { return RunUserTokenRevoke(*trevoke_id); });

  auto audit_format = std::make_shared<OutputFormat>(OutputFormat::kTable);
  auto audit_since = std::make_shared<std::string>();
  auto audit_limit = std::make_shared<int>(1000);
  CLI::App* audit = admin->add_subcommand(
      "audit", "The audit log: admin, money and token actions, who took them and from where");
  audit->add_option("--since", *audit_since, "Only entries since: 7d, 24h, or 2026-12-01");
  audit->add_option("--limit", *audit_limit, "At most this many, the newest")
      ->capture_default_str()
      ->check(CLI::Range(1, 100'000));
  AddOutputFlag(audit, audit_format.get());
  SetAction(audit, [audit_format, audit_since, audit_limit] {
    return RunAudit(*audit_format, *audit_since, *audit_limit);
  });

  CLI::App* node = admin->add_subcommand("node", "Drain, reopen or revoke a node");
  node->require_subcommand(1);
  for (bool drain : {true, false}) {
    auto name = std::make_shared<std::string>();
    CLI::App* c = node->add_subcommand(drain ? "drain" : "undrain",
                                       drain ? "Stop placing new jobs on a node (running ones go on)"
                                             : "Let a drained node take new jobs again");
    c->add_option("node", *name, "Node name or id")->required();
    auto evict = std::make_shared<bool>(false);
    if (drain) {
      c->add_flag("--evict", *evict,
                  "Also stop its running jobs (notice node_draining): they resume elsewhere");
    }
    SetAction(c, [name, drain, evict] { return RunDrain(*name, drain, *evict); });
  }
  auto revoked = std::make_shared<std::string>();
  CLI::App* revoke = node->add_subcommand(
      "revoke", "Revoke a node's credentials: nothing it sends is accepted, its jobs run elsewhere");
  revoke->add_option("node", *revoked, "Node name or id")->required();
  SetAction(revoke, [revoked] { return RunNodeRevoke(*revoked); });
}

}  // namespace tide::cli
