package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/aliases"
	rerr "github.com/rotorproxy/rotor/errors"
)

// aliasArgs are what "rotor alias" was given: the verb's arguments and
// its flags.
type aliasArgs struct {
	args   []string
	kind   accounts.Kind
	asJSON bool
}

// aliasVerb is one "rotor alias" verb: how many arguments it takes and
// what runs it.
type aliasVerb struct {
	nargs int
	run   func(a *app, st *aliases.Store, in aliasArgs) error
}

// aliasVerbs are the verbs of "rotor alias".
var aliasVerbs = map[string]aliasVerb{
	"set":  {2, aliasSet},
	"list": {0, aliasList},
	"rm":   {1, aliasRemove},
}

// cmdAlias keeps the model aliases of the home (docs/aliases.md): set, list, rm.
func cmdAlias(a *app, args []string) error {
	fs := a.flags()
	kind := fs.String("kind", "", "with set: rename only on accounts of kind `K`, chatgpt or api-key; none renames on every kind")
	asJSON := fs.Bool("json", false, "with list: print JSON")
	pos, err := a.parse(fs, args)
	if err != nil {
		return err
	}
	usage := rerr.Validation("args", "Usage: rotor "+commands["alias"].usage)
	if len(pos) == 0 {
		return usage
	}
	verb, ok := aliasVerbs[pos[0]]
	if !ok || len(pos)-1 != verb.nargs {
		return usage
	}
	if *kind != "" && pos[0] != "set" {
		return rerr.Validation("kind", "--kind is for \"rotor alias set\": an alias is removed by its FROM alone.")
	}
	dir, err := a.home()
	if err != nil {
		return err
	}
	st, err := aliases.Open(dir)
	if err != nil {
		return err
	}
	return verb.run(a, st, aliasArgs{args: pos[1:], kind: accounts.Kind(*kind), asJSON: *asJSON})
}

func aliasSet(a *app, st *aliases.Store, in aliasArgs) error {
	al := aliases.Alias{From: in.args[0], To: in.args[1], Kind: in.kind}
	if _, err := st.Update(func(list []aliases.Alias) ([]aliases.Alias, error) { return aliases.Set(list, al) }); err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "Alias set: %s goes out as %s on %s (running serves within 1s).\n", al.From, al.To, kindText(al.Kind))
	return nil
}

func aliasRemove(a *app, st *aliases.Store, in aliasArgs) error {
	from := in.args[0]
	_, err := st.Update(func(list []aliases.Alias) ([]aliases.Alias, error) {
		list, ok := aliases.Remove(list, from)
		if !ok {
			return nil, rerr.NotFound(fmt.Sprintf("No alias of %q. \"rotor alias list\" shows them.", from))
		}
		return list, nil
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "Alias removed: %s goes out as it is asked for (running serves within 1s).\n", from)
	return nil
}

// aliasJSON is one alias in "rotor alias list --json"; kind is null
// when the alias applies on every kind.
type aliasJSON struct {
	From string         `json:"from"`
	To   string         `json:"to"`
	Kind *accounts.Kind `json:"kind"`
}

func aliasList(a *app, st *aliases.Store, in aliasArgs) error {
	list, err := st.Load()
	if err != nil {
		return err
	}
	if in.asJSON {
		out := make([]aliasJSON, len(list))
		for i, al := range list {
			out[i] = aliasJSON{From: al.From, To: al.To}
			if al.Kind != "" {
				out[i].Kind = &list[i].Kind
			}
		}
		return a.exportJSON("alias list", struct {
			Aliases []aliasJSON `json:"aliases"`
		}{out})
	}
	if len(list) == 0 {
		fmt.Fprintln(a.stdout, "No aliases. Add one with \"rotor alias set FROM TO\".")
		return nil
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "FROM\tTO\tON")
	for _, al := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", al.From, al.To, kindText(al.Kind))
	}
	return tw.Flush()
}

// kindText names the accounts an alias of kind k renames on.
func kindText(k accounts.Kind) string {
	if k == "" {
		return "every account"
	}
	return string(k) + " accounts"
}
