// Package natsauth says who may do what on troy's NATS server: one user
// per service, with the subjects its work needs and nothing else, client
// roles (submitting audits, SIEMs reading findings, asking the guard) and
// an operator. Config renders them as a nats-server authorization block.
//
// What each service needs follows its consumers, its outputs and its
// buckets in pipelines/topology.yaml; services run with --no-provision, an
// operator runs troy provision.
package natsauth

import (
	"fmt"
	"slices"
	"strings"

	"golang.org/x/crypto/bcrypt"

	"github.com/troy-audit/troy/pipelines"
	"github.com/troy-audit/troy/pkg/bus"
)

// Operator may do everything.
const Operator = "operator"

// Client roles.
const (
	Audit       = "audit"        // submits traces and waits for their reports (troy audit, audit-batch)
	SIEM        = "siem"         // reads findings (troy violations tail, a SIEM's own consumer)
	GuardClient = "guard-client" // asks the guard (troy check --nats-url, the SDK)
)

// User is one user and its permissions.
type User struct {
	Name      string
	Publish   []string
	Subscribe []string
	Deny      []string // publishes refused even where Publish would allow
	// Responses lets it answer requests sent to it (the guard, cancels).
	Responses bool
	All       bool // the operator: no restriction

	info []string // streams a client may inspect; nil for a service (all)
}

// Users lists every user: each component of troy serve, the client roles
// and the operator.
func Users(topo *pipelines.Topology) []User {
	var users []User
	add := func(name string, u User) {
		u.Name = name
		u.Subscribe = append(u.Subscribe, bus.InboxPrefix(name)+".>")
		// the name lists troy's topology check reads (names only)
		u.Publish = append(u.Publish, "$JS.API.INFO", "$JS.API.STREAM.NAMES", "$JS.API.CONSUMER.NAMES.>")
		if u.info != nil {
			u.info = append(u.info, "KV_troy_policies")
		}
		if u.info == nil { // a service: the buckets and streams its HTTP API opens need STREAM.INFO
			u.Publish = append(u.Publish, "$JS.API.STREAM.INFO.>", "$JS.API.CONSUMER.INFO.>")
		}
		for _, s := range u.info {
			u.Publish = append(u.Publish, "$JS.API.STREAM.INFO."+s, "$JS.API.CONSUMER.INFO."+s+".>")
		}
		// the policy store every troy serve watches and clients check;
		// only the operator writes it
		u.Publish = append(u.Publish, kvRead("troy_policies", true)...)
		u.Deny = append(u.Deny, sealed...)
		slices.Sort(u.Publish)
		u.Publish = slices.Compact(u.Publish)
		users = append(users, u)
	}
	consumer := func(c pipelines.Consumer) []string {
		return []string{"$JS.API.CONSUMER.MSG.NEXT." + c.Stream + "." + c.Name, "$JS.ACK." + c.Stream + "." + c.Name + ".>"}
	}
	durable := func(name string) []string {
		var out []string
		for _, c := range topo.Durables() {
			if c.Name == name || strings.HasPrefix(c.Name, name+"-") { // streamer-0…7
				out = append(out, consumer(c)...)
			}
		}
		return out
	}
	stage := func(name string, outputs ...string) User {
		p := durable(name)
		for _, o := range outputs {
			p = append(p, "troy."+o+".>")
		}
		return User{Publish: append(p, "troy.dlq."+name+".>")}
	}
	join := func(u User, more ...[]string) User {
		for _, m := range more {
			u.Publish = append(u.Publish, m...)
		}
		return u
	}
	ingestHTTP := slices.Concat([]string{"troy.ingest.>"}, streamRead("TROY_STEPS"), kvWrite("troy_streams"))

	add("ingest", join(stage("ingest", "trace", "rejected"), ingestHTTP)) // streams over HTTP with serve's --policy
	add("graph", stage("graph", "graph"))
	add("evaluator", stage("evaluator", "eval", "violations"))
	add("explainer", join(stage("explainer", "explain"), kvWrite("troy_explanations")))
	add("scorer", stage("scorer", "score"))
	add("reporter", join(stage("reporter", "report"), kvWrite("troy_join"), []string{"$JS.API.STREAM.PURGE.KV_troy_join"}, ledgerWriter("reporter.>")))
	add("streamer", join(stage("streamer", "ingest", "violations"), ingestHTTP, orderedConsumer("TROY_STEPS"),
		[]string{"$JS.API.STREAM.PURGE.TROY_STEPS"}))
	add("guard", User{Subscribe: []string{"troy.guard.check"}, Responses: true,
		Publish: slices.Concat(kvWrite("troy_sessions"), ledgerWriter("guard.>"))})
	add("checkpointer", User{Publish: slices.Concat(orderedConsumer("LEDGER"), []string{"troy.checkpoints.ledger"}, streamRead("LEDGER_CHECKPOINTS"))})
	runner := join(stage("agent-runner", "agent.events", "agent.result", "agent.approvals", "ingest"),
		kvWrite("troy_agent_sessions"), kvWrite("troy_agent_spend"), kvWrite("troy_agent_approvals"), kvRead("troy_agent_approvals", true),
		kvWrite("troy_streams"), ledgerWriter("*")) // a run's ledger is its id, one token
	runner.Subscribe, runner.Responses = []string{"troy.agent.cancel.>"}, true
	add("agent-runner", runner)
	for _, f := range []string{"splunk", "syslog"} {
		add(f, User{Publish: durable(f)})
	}

	// Client roles: no purge, no consumer deletes, only their own
	// streams. An audit client submits whole traces (troy.ingest.<run>,
	// not the streamed steps of TROY_STEPS) and reads its outcomes; a SIEM
	// reads findings by direct gets and never touches a consumer (the
	// forwarders' durables are on its stream); a guard client only asks.
	add(Audit, User{Publish: slices.Concat([]string{"troy.ingest.*"}, orderedConsumer("TROY_OUTCOMES"), orderedConsumer("TROY_DLQ")),
		info: []string{"TROY_OUTCOMES", "TROY_DLQ"}})
	add(SIEM, User{Publish: streamRead("TROY_VIOLATIONS"), info: []string{"TROY_VIOLATIONS"}})
	add(GuardClient, User{Publish: []string{"troy.guard.check"}, info: []string{}})
	users = append(users, User{Name: Operator, All: true})
	return users
}

// sealed are the API calls that would rewrite the ledger: nobody but the
// operator makes them.
var sealed = func() []string {
	var out []string
	for _, s := range []string{"LEDGER", "LEDGER_CHECKPOINTS"} {
		for _, op := range []string{"UPDATE", "DELETE", "PURGE", "MSG.DELETE"} {
			out = append(out, "$JS.API.STREAM."+op+"."+s)
		}
	}
	return out
}()

// streamRead gets single messages from a stream: direct gets (by sequence,
// or last by subject) and the leader's.
func streamRead(stream string) []string {
	return []string{"$JS.API.DIRECT.GET." + stream, "$JS.API.DIRECT.GET." + stream + ".>", "$JS.API.STREAM.MSG.GET." + stream}
}

// kvRead reads a bucket (gets; with watch, watches and key lists).
func kvRead(bucket string, watch bool) []string {
	out := streamRead("KV_" + bucket)
	if watch {
		out = append(out, "$JS.API.CONSUMER.CREATE.KV_"+bucket+".>", "$JS.API.CONSUMER.DELETE.KV_"+bucket+".>", "$JS.FC.KV_"+bucket+".>")
	}
	return out
}

// kvWrite reads and writes a bucket's keys.
func kvWrite(bucket string) []string {
	return append(kvRead(bucket, false), "$KV."+bucket+".>")
}

// orderedConsumer reads a stream through ordered consumers (their names
// are random, so the grant is the stream's). No delete: one user's grant
// would reach every consumer of the stream, and an ordered consumer left
// behind goes away by itself once inactive.
func orderedConsumer(stream string) []string {
	return []string{"$JS.API.CONSUMER.CREATE." + stream + ".>", "$JS.API.CONSUMER.MSG.NEXT." + stream + ".>"}
}

// ledgerWriter appends to the ledgers whose ids match (and reads them back
// through the leader).
func ledgerWriter(ids string) []string {
	return append([]string{"troy.ledger." + ids}, streamRead("LEDGER")...)
}

// Passwords says how a user's password appears in the config.
type Passwords func(user string) (string, error)

// Hashed stores each password (from pw) as a bcrypt hash.
func Hashed(pw map[string]string) Passwords {
	return func(user string) (string, error) {
		p, ok := pw[user]
		if !ok {
			return "", fmt.Errorf("no password for user %s", user)
		}
		hash, err := bcrypt.GenerateFromPassword([]byte(p), bcrypt.DefaultCost)
		return fmt.Sprintf("%q", string(hash)), err
	}
}

// FromEnv has the server read each password from its environment when it
// starts: TROY_NATS_PW_<USER> (EnvName).
func FromEnv(user string) (string, error) { return "$" + EnvName(user), nil }

// EnvName is the variable holding a user's password.
func EnvName(user string) string {
	return "TROY_NATS_PW_" + strings.ToUpper(strings.ReplaceAll(user, "-", "_"))
}

// Config renders users as a nats-server authorization block.
func Config(users []User, passwords Passwords) (string, error) {
	var b strings.Builder
	b.WriteString("# troy's NATS users, written by troy nats-config: one a service, client roles, an operator.\n" +
		"# Each may do its own work and nothing else; only the operator provisions or rewrites.\nauthorization {\n  users = [\n")
	for _, u := range users {
		pw, err := passwords(u.Name)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "    {\n      user: %q\n      password: %s\n", u.Name, pw)
		if !u.All {
			fmt.Fprintf(&b, "      permissions: {\n        publish: { allow: %s, deny: %s }\n        subscribe: { allow: %s }\n",
				list(u.Publish), list(u.Deny), list(u.Subscribe))
			if u.Responses {
				b.WriteString("        allow_responses: true\n")
			}
			b.WriteString("      }\n")
		}
		b.WriteString("    }\n")
	}
	b.WriteString("  ]\n}\n")
	return b.String(), nil
}

func list(subjects []string) string {
	if len(subjects) == 0 {
		return "[]"
	}
	q := make([]string, len(subjects))
	for i, s := range subjects {
		q[i] = fmt.Sprintf("%q", s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// ClusterConfig renders the inside of a nats-server cluster block: the
// user every route logs in as and the routes to dial with it, so no
// process that can reach the cluster port joins as a node (and sees
// every message, past every permission). routes are host:port; a node's
// route to itself is ignored by the server.
func ClusterConfig(routes []string, password string) (string, error) {
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.DefaultCost)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("# troy's cluster routes, written by troy nats-config: a node logs in to join. Keep this file secret.\n")
	fmt.Fprintf(&b, "authorization {\n  user: \"route\"\n  password: %q\n}\nroutes: [\n", string(hash))
	for _, r := range routes {
		fmt.Fprintf(&b, "  %q\n", "nats-route://route:"+password+"@"+r)
	}
	b.WriteString("]\n")
	return b.String(), nil
}
