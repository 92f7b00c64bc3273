// Package datatool is the analyze_data tool: questions about a tabular file
// in the workspace, answered by DuckDB. It is a package of its own because
// DuckDB is a cgo library of ~70 MB: programs that embed the agent loop
// without it stay pure Go.
package datatool

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	_ "github.com/duckdb/duckdb-go/v2" // the "duckdb" database/sql driver

	"github.com/troy-audit/troy/pkg/agent/tools"
)

// Limits of analyze_data.
const (
	MaxDataRows      = 50
	MaxDataColumns   = 50
	MaxCellChars     = 200
	MaxDataContent   = 64 << 10
	MaxDataFileBytes = 256 << 20
	dataMemoryLimit  = "512MB"
)

// AnalyzeData answers questions about a tabular file in the workspace with
// DuckDB. The file is copied into an in-memory table; then the connection
// loses all access to files, extensions and settings, so a `query` can read
// only that table and change nothing outside it.
type AnalyzeData struct{}

type dataArgs struct {
	Operation  string            `json:"operation"`
	Path       string            `json:"path"`
	N          int               `json:"n"`
	Expression string            `json:"expression"`
	Column     string            `json:"column"`
	Columns    []string          `json:"columns"`
	GroupBy    any               `json:"group_by"`
	Agg        map[string]string `json:"agg"`
}

// Spec implements tools.Tool.
func (AnalyzeData) Spec() tools.Spec {
	return tools.Spec{
		Name: "analyze_data",
		Description: "Analyse a CSV, TSV, JSON, JSONL or Parquet file in the workspace: profile, head, describe, value_counts, aggregate, correlate, " +
			"or query (one read-only SQL SELECT over the table `data`). tools.Output is at most 50 rows.",
		Safety:  tools.ReadOnly,
		Returns: "a table as text",
		InputSchema: json.RawMessage(`{"type":"object","additionalProperties":false,"required":["operation","path"],
 "properties":{
  "operation":{"type":"string","enum":["profile","head","describe","query","aggregate","value_counts","correlate"]},
  "path":{"type":"string","minLength":1},
  "n":{"type":"integer","minimum":1,"maximum":50,"default":10},
  "expression":{"type":"string","description":"query: a SELECT over the table data"},
  "column":{"type":"string","description":"value_counts: the column"},
  "columns":{"type":"array","items":{"type":"string"},"description":"correlate: numeric columns (default all)"},
  "group_by":{"oneOf":[{"type":"string"},{"type":"array","items":{"type":"string"},"minItems":1}]},
  "agg":{"type":"object","additionalProperties":{"type":"string","enum":["sum","mean","avg","min","max","count","median","std"]},
         "description":"aggregate: {column: function}"}}}`),
	}
}

// Run implements tools.Tool.
func (AnalyzeData) Run(ctx context.Context, env *tools.Env, raw json.RawMessage) (tools.Output, *tools.Error) {
	var a dataArgs
	if err := json.Unmarshal(raw, &a); err != nil {
		return tools.Output{}, tools.Errorf(tools.InvalidInput, "analyze_data arguments: %v", err)
	}
	if a.N <= 0 {
		a.N = 10
	}
	switch {
	case a.Operation == "query" && strings.TrimSpace(a.Expression) == "":
		return tools.Output{}, tools.Errorf(tools.InvalidInput, "`expression` is required for query.").Fix("Send a SELECT over the table `data`.")
	case a.Operation == "value_counts" && a.Column == "":
		return tools.Output{}, tools.Errorf(tools.InvalidInput, "`column` is required for value_counts.")
	case a.Operation == "aggregate" && (a.GroupBy == nil || len(a.Agg) == 0):
		return tools.Output{}, tools.Errorf(tools.InvalidInput, "`group_by` and `agg` are required for aggregate.").
			Fix(`For example group_by: "region", agg: {"revenue": "sum"}.`)
	}
	reader, e := readerFor(a.Path, "")
	if e != nil {
		return tools.Output{}, e
	}
	f, byFD, e := dataFile(env, a.Path)
	if e != nil {
		return tools.Output{}, e
	}
	defer f.Close()
	reader, _ = readerFor(a.Path, byFD)
	db, err := sql.Open("duckdb", "")
	if err != nil {
		return tools.Output{}, tools.Errorf(tools.DependencyMissing, "DuckDB could not start: %v", err)
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		return tools.Output{}, tools.Errorf(tools.Internal, "DuckDB connection: %v", err)
	}
	defer conn.Close()
	for _, s := range []string{"SET threads = 1", "SET memory_limit = '" + dataMemoryLimit + "'", "SET autoinstall_known_extensions = false", "SET autoload_known_extensions = false"} {
		if _, err := conn.ExecContext(ctx, s); err != nil {
			return tools.Output{}, tools.Errorf(tools.Internal, "DuckDB setting %q: %v", s, err)
		}
	}
	if _, err := conn.ExecContext(ctx, "CREATE TABLE data AS SELECT * FROM "+reader); err != nil {
		if ctx.Err() != nil {
			return tools.Output{}, tools.Errorf(tools.Timeout, "Reading %s was stopped: %v", a.Path, ctx.Err())
		}
		return tools.Output{}, tools.Errorf(tools.ExecutionFailed, "Could not parse %s: %s", a.Path, cleanDuck(err)).
			Fix("Check the file's format matches its extension.")
	}
	// From here on the connection reads nothing but the table.
	for _, s := range []string{"SET enable_external_access = false", "SET lock_configuration = true"} {
		if _, err := conn.ExecContext(ctx, s); err != nil {
			return tools.Output{}, tools.Errorf(tools.Internal, "DuckDB setting %q: %v", s, err)
		}
	}
	cols, types, e := columns(ctx, conn)
	if e != nil {
		return tools.Output{}, e
	}
	d := &dataset{conn: conn, cols: cols, types: types}
	switch a.Operation {
	case "profile":
		return d.profile(ctx)
	case "head":
		return d.table(ctx, fmt.Sprintf("SELECT * FROM data LIMIT %d", a.N), "SELECT count(*) FROM data")
	case "describe":
		return d.table(ctx, "SELECT * FROM (SUMMARIZE data)", "")
	case "value_counts":
		if !slices.Contains(cols, a.Column) {
			return tools.Output{}, unknownColumn(a.Column, cols)
		}
		q := fmt.Sprintf("SELECT %s, count(*) AS count FROM data GROUP BY ALL ORDER BY count DESC, 1 LIMIT %d", ident(a.Column), a.N)
		return d.table(ctx, q, fmt.Sprintf("SELECT count(DISTINCT %s) FROM data", ident(a.Column)))
	case "aggregate":
		return d.aggregate(ctx, a)
	case "correlate":
		return d.correlate(ctx, a.Columns)
	case "query":
		return d.query(ctx, a.Expression)
	}
	return tools.Output{}, tools.Errorf(tools.InvalidInput, "Unknown operation %q.", a.Operation)
}

// dataFile opens the model's file inside the workspace (no link out, no
// special or hard-linked file) and names it for DuckDB by its descriptor:
// DuckDB then reads exactly the file that was checked, never a glob of the
// name nor a file swapped in after the check.
func dataFile(env *tools.Env, raw string) (*os.File, string, *tools.Error) {
	p, e := tools.Confine(raw)
	if e != nil {
		return nil, "", e
	}
	if env.Root == nil {
		return nil, "", tools.Errorf(tools.Internal, "analyze_data: the run has no workspace")
	}
	f, fi, e := tools.OpenRegular(env.Root, p, raw)
	if e != nil {
		return nil, "", e
	}
	if fi.Size() > MaxDataFileBytes {
		f.Close()
		return nil, "", tools.Errorf(tools.ResourceLimit, "%s is %d bytes; analyze_data reads at most %d.", raw, fi.Size(), MaxDataFileBytes)
	}
	byFD := fmt.Sprintf("/proc/self/fd/%d", f.Fd())
	if _, err := os.Stat(byFD); err != nil {
		f.Close()
		return nil, "", tools.Errorf(tools.DependencyMissing, "analyze_data needs /proc (Linux) to hand the file to DuckDB: %v", err)
	}
	return f, byFD, nil
}

func readerFor(name, file string) (string, *tools.Error) {
	lit := "'" + strings.ReplaceAll(file, "'", "''") + "'"
	switch ext := strings.ToLower(filepath.Ext(name)); ext {
	case ".csv":
		return "read_csv(" + lit + ", auto_detect = true)", nil
	case ".tsv":
		return "read_csv(" + lit + ", auto_detect = true, delim = '\t')", nil
	case ".json":
		return "read_json_auto(" + lit + ")", nil
	case ".jsonl", ".ndjson":
		return "read_json_auto(" + lit + ", format = 'newline_delimited')", nil
	case ".parquet":
		return "read_parquet(" + lit + ")", nil
	default:
		if ext == "" {
			ext = "(none)"
		}
		return "", tools.Errorf(tools.InvalidInput, "Unsupported file type: %s", ext).Fix("analyze_data reads .csv, .tsv, .json, .jsonl and .parquet files.")
	}
}

func ident(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

var duckNoise = regexp.MustCompile(`(?s)\n\s*LINE \d+:.*$`)

// cleanDuck keeps DuckDB's message and drops the echo of the SQL.
func cleanDuck(err error) string {
	msg := duckNoise.ReplaceAllString(err.Error(), "")
	if len(msg) > 600 {
		msg = msg[:600] + "…"
	}
	return msg
}

func unknownColumn(c string, cols []string) *tools.Error {
	return tools.Errorf(tools.InvalidInput, "No column named %q.", c).Fix("Columns: " + strings.Join(cols, ", ") + ".")
}

func columns(ctx context.Context, conn *sql.Conn) ([]string, []string, *tools.Error) {
	rows, err := conn.QueryContext(ctx, "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = 'data' ORDER BY ordinal_position")
	if err != nil {
		return nil, nil, tools.Errorf(tools.Internal, "columns: %v", err)
	}
	defer rows.Close()
	var cols, types []string
	for rows.Next() {
		var c, t string
		if err := rows.Scan(&c, &t); err != nil {
			return nil, nil, tools.Errorf(tools.Internal, "columns: %v", err)
		}
		cols, types = append(cols, c), append(types, t)
	}
	return cols, types, nil
}

type dataset struct {
	conn  *sql.Conn
	cols  []string
	types []string
}

func (d *dataset) scalar(ctx context.Context, q string) (int64, error) {
	var n int64
	err := d.conn.QueryRowContext(ctx, q).Scan(&n)
	return n, err
}

func (d *dataset) profile(ctx context.Context) (tools.Output, *tools.Error) {
	rows, err := d.scalar(ctx, "SELECT count(*) FROM data")
	if err != nil {
		return tools.Output{}, tools.Errorf(tools.ExecutionFailed, "%s", cleanDuck(err))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "shape: %d rows x %d columns\n", rows, len(d.cols))
	for i, c := range d.cols {
		var nulls, unique int64
		q := fmt.Sprintf("SELECT count(*) - count(%[1]s), count(DISTINCT %[1]s) FROM data", ident(c))
		if err := d.conn.QueryRowContext(ctx, q).Scan(&nulls, &unique); err != nil {
			return tools.Output{}, tools.Errorf(tools.ExecutionFailed, "%s", cleanDuck(err))
		}
		fmt.Fprintf(&b, "- %s (%s): nulls=%d unique=%d", c, d.types[i], nulls, unique)
		if numeric(d.types[i]) {
			var lo, hi, mean sql.NullFloat64
			q := fmt.Sprintf("SELECT min(%[1]s), max(%[1]s), avg(%[1]s) FROM data", ident(c))
			if err := d.conn.QueryRowContext(ctx, q).Scan(&lo, &hi, &mean); err == nil && mean.Valid {
				fmt.Fprintf(&b, " min=%g max=%g mean=%.4g", lo.Float64, hi.Float64, mean.Float64)
			}
		}
		b.WriteByte('\n')
	}
	return tools.Output{Content: strings.TrimRight(b.String(), "\n"), Data: map[string]any{"rows": rows, "columns": d.cols}}, nil
}

func numeric(t string) bool {
	t = strings.ToUpper(t)
	for _, p := range []string{"INT", "DOUBLE", "FLOAT", "DECIMAL", "REAL", "BIGINT", "SMALLINT", "TINYINT", "HUGEINT", "UBIGINT", "UINTEGER"} {
		if strings.Contains(t, p) {
			return true
		}
	}
	return false
}

var aggFuncs = map[string]string{"sum": "sum", "mean": "avg", "avg": "avg", "min": "min", "max": "max", "count": "count", "median": "median", "std": "stddev_samp"}

func (d *dataset) aggregate(ctx context.Context, a dataArgs) (tools.Output, *tools.Error) {
	var groups []string
	switch g := a.GroupBy.(type) {
	case string:
		groups = []string{g}
	case []any:
		for _, x := range g {
			s, _ := x.(string)
			groups = append(groups, s)
		}
	}
	var sel, gb []string
	for _, g := range groups {
		if !slices.Contains(d.cols, g) {
			return tools.Output{}, unknownColumn(g, d.cols)
		}
		sel, gb = append(sel, ident(g)), append(gb, ident(g))
	}
	keys := make([]string, 0, len(a.Agg))
	for k := range a.Agg {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, c := range keys {
		if !slices.Contains(d.cols, c) {
			return tools.Output{}, unknownColumn(c, d.cols)
		}
		fn := a.Agg[c]
		sel = append(sel, fmt.Sprintf("%s(%s) AS %s", aggFuncs[fn], ident(c), ident(fn+"_"+c)))
	}
	q := fmt.Sprintf("SELECT %s FROM data GROUP BY %s ORDER BY %d DESC", strings.Join(sel, ", "), strings.Join(gb, ", "), len(groups)+1)
	return d.table(ctx, q, fmt.Sprintf("SELECT count(*) FROM (SELECT 1 FROM data GROUP BY %s)", strings.Join(gb, ", ")))
}

func (d *dataset) correlate(ctx context.Context, want []string) (tools.Output, *tools.Error) {
	var cols []string
	for i, c := range d.cols {
		if len(want) == 0 && numeric(d.types[i]) {
			cols = append(cols, c)
		}
	}
	for _, c := range want {
		if !slices.Contains(d.cols, c) {
			return tools.Output{}, unknownColumn(c, d.cols)
		}
		cols = append(cols, c)
	}
	if len(cols) < 2 {
		return tools.Output{}, tools.Errorf(tools.InvalidInput, "correlate needs at least two numeric columns; found %d.", len(cols))
	}
	var parts []string
	for i := range cols {
		for j := i + 1; j < len(cols); j++ {
			parts = append(parts, fmt.Sprintf("SELECT '%s' AS a, '%s' AS b, corr(%s, %s) AS corr FROM data",
				strings.ReplaceAll(cols[i], "'", "''"), strings.ReplaceAll(cols[j], "'", "''"), ident(cols[i]), ident(cols[j])))
		}
	}
	q := "SELECT * FROM (" + strings.Join(parts, " UNION ALL ") + ") ORDER BY abs(corr) DESC NULLS LAST"
	return d.table(ctx, q, "")
}

var leadingComment = regexp.MustCompile(`^(\s*(--[^\n]*\n|/\*.*?\*/))*\s*`)

// query runs one read-only statement. The connection cannot reach files or
// change settings any more; this check also keeps it to reading.
func (d *dataset) query(ctx context.Context, expr string) (tools.Output, *tools.Error) {
	q := strings.TrimSpace(expr)
	q = strings.TrimSpace(strings.TrimSuffix(q, ";"))
	head := strings.ToUpper(leadingComment.ReplaceAllString(q, ""))
	if !(strings.HasPrefix(head, "SELECT") || strings.HasPrefix(head, "WITH") || strings.HasPrefix(head, "FROM") ||
		strings.HasPrefix(head, "SUMMARIZE") || strings.HasPrefix(head, "DESCRIBE")) || strings.Contains(q, ";") {
		return tools.Output{}, tools.Errorf(tools.InvalidInput, "query takes one read-only statement (SELECT, WITH, FROM, SUMMARIZE or DESCRIBE).").
			Fix("Send a single SELECT over the table `data`, without `;`.")
	}
	return d.table(ctx, q, "SELECT count(*) FROM (\n"+q+"\n)")
}

// table renders at most MaxDataRows rows of q; count, when given, says how
// many there were in all.
func (d *dataset) table(ctx context.Context, q, count string) (tools.Output, *tools.Error) {
	// The query on lines of its own: a -- comment in it cannot reach the
	// closing parenthesis and the limit.
	rows, err := d.conn.QueryContext(ctx, fmt.Sprintf("SELECT * FROM (\n%s\n) LIMIT %d", q, MaxDataRows+1))
	if err != nil {
		if ctx.Err() != nil {
			return tools.Output{}, tools.Errorf(tools.Timeout, "The query was stopped: %v", ctx.Err())
		}
		return tools.Output{}, tools.Errorf(tools.InvalidInput, "The query failed: %s", cleanDuck(err)).Fix("Columns: " + strings.Join(d.cols, ", ") + ".")
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	out := tools.Output{Data: map[string]any{"columns": cols}}
	shownCols := cols
	if len(cols) > MaxDataColumns {
		shownCols, out.Truncated = cols[:MaxDataColumns], true
	}
	var lines [][]string
	for len(lines) <= MaxDataRows && rows.Next() { // never more rows than shown, whatever the SQL

		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return tools.Output{}, tools.Errorf(tools.ExecutionFailed, "%s", cleanDuck(err))
		}
		line := make([]string, len(shownCols))
		for i := range shownCols {
			line[i] = cell(vals[i])
		}
		lines = append(lines, line)
	}
	if err := rows.Err(); err != nil {
		return tools.Output{}, tools.Errorf(tools.InvalidInput, "The query failed: %s", cleanDuck(err))
	}
	shown := len(lines)
	if shown > MaxDataRows {
		lines, shown, out.Truncated = lines[:MaxDataRows], MaxDataRows, true
	}
	var b strings.Builder
	b.WriteString(strings.Join(shownCols, " | "))
	if len(shownCols) < len(cols) {
		fmt.Fprintf(&b, " | … (%d more columns)", len(cols)-len(shownCols))
	}
	for _, l := range lines {
		if b.Len() > MaxDataContent {
			out.Truncated = true
			break
		}
		b.WriteString("\n" + strings.Join(l, " | "))
	}
	total := int64(shown)
	if count != "" {
		if n, err := d.scalar(ctx, count); err == nil {
			total = n
		}
	}
	if total > int64(shown) {
		out.Truncated = true
		fmt.Fprintf(&b, "\n\n[showing %d of %d rows]", shown, total)
	}
	out.Data["rows"] = total
	out.Content = b.String()
	return out, nil
}

func cell(v any) string {
	switch x := v.(type) {
	case nil:
		return "NULL"
	case float64:
		return fmt.Sprintf("%.10g", x)
	case float32:
		return fmt.Sprintf("%.7g", x)
	case []byte:
		return clipCell(fmt.Sprintf("%q", x))
	}
	return clipCell(strings.ReplaceAll(fmt.Sprint(v), "\n", " "))
}

// clipCell bounds one value (at a character boundary).
func clipCell(s string) string {
	if len(s) <= MaxCellChars {
		return s
	}
	cut := MaxCellChars
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut] + "…"
}
