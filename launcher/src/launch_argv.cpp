#include "launch_argv.hpp"

#include "ddp/common/error.hpp"

namespace ddp::launcher {

const CLI::Option* find_long(const CLI::App& app, const std::string& name, bool prefix) {
  std::vector<const CLI::Option*> found;
  std::string all;
  for (const CLI::Option* o : app.get_options()) {
    for (const auto& l : o->get_lnames()) {
      if ((prefix ? l.rfind(name, 0) != 0 : l != name) || (!found.empty() && found.back() == o)) {
        continue;
      }
      all += (all.empty() ? "--" : ", --") + o->get_lnames().front();
      found.push_back(o);
    }
  }
  if (found.size() > 1) throw ConfigError("--" + name + ": ambiguous option, could be " + all);
  return found.empty() ? nullptr : found.front();
}

std::vector<std::string> expand_prefixes(const CLI::App& app, std::vector<std::string> argv,
                                         std::vector<std::pair<std::string, std::string>>* expanded) {
  for (std::size_t i = 1; i < argv.size(); ++i) {
    std::string& a = argv[i];
    if (a == "--" || a.size() < 2 || a[0] != '-') break;  // the program starts here
    const CLI::Option* opt = nullptr;
    bool inline_value = false;
    if (a.rfind("--", 0) == 0) {
      const auto eq = a.find('=');
      const std::string name = a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
      inline_value = eq != std::string::npos;
      opt = find_long(app, name, false);
      if (opt == nullptr && !name.empty() && (opt = find_long(app, name, true)) != nullptr) {
        const std::string typed = a;
        a = "--" + opt->get_lnames().front() + (inline_value ? a.substr(eq) : "");
        if (expanded != nullptr) expanded->emplace_back(typed, a);
      }
    } else {
      for (const CLI::Option* o : app.get_options()) {
        for (const auto& sn : o->get_snames()) {
          if (a.size() >= 2 && a.substr(1, 1) == sn) opt = o;
        }
      }
      inline_value = a.size() > 2;
    }
    // An option's value in the next argument is not the program.
    if (opt != nullptr && opt->get_type_size() > 0 && !inline_value) ++i;
  }
  return argv;
}

std::vector<std::string> abbreviation_warnings(const CLI::App& app, const std::vector<std::string>& args) {
  std::vector<std::pair<std::string, std::string>> expanded;
  expand_prefixes(app, args, &expanded);
  std::vector<std::string> out;
  for (const auto& [typed, full] : expanded) {
    if (full.rfind("--local_ranks_filter", 0) != 0) continue;
    out.push_back(typed + " is read as " + full +
                  " (an abbreviation): only those local ranks' output is shown; write --local_ranks_filter "
                  "in full, or put --local_rank after the program for the program to read");
  }
  return out;
}

std::string completion_script(const CLI::App& app, const std::string& shell) {
  std::string words;
  for (const CLI::Option* o : app.get_options()) {
    for (const auto& l : o->get_lnames()) words += (words.empty() ? "--" : " --") + l;
  }
  if (shell == "tcsh") return "complete ddprun 'c/--/(" + words + ")/' 'p/*/f/'\n";
  std::string out;
  if (shell == "zsh") out += "autoload -U +X bashcompinit && bashcompinit\n";
  out +=
      "_ddprun() {\n"
      "  local cur=${COMP_WORDS[COMP_CWORD]}\n"
      "  if [[ $cur == -* ]]; then\n"
      "    COMPREPLY=($(compgen -W \"" +
      words +
      "\" -- \"$cur\"))\n"
      "  else\n"
      "    COMPREPLY=($(compgen -f -- \"$cur\"))\n"
      "  fi\n"
      "}\n"
      "complete -o filenames -F _ddprun ddprun\n";
  return out;
}

}  // namespace ddp::launcher
