package e2e

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	json "github.com/go-json-experiment/json/v1"
	"github.com/google/uuid"
	"github.com/printpod/pod/commands/catalog"
	"github.com/printpod/pod/internal/testenv"
	catalogrm "github.com/printpod/pod/projections/catalog"
	"github.com/printpod/pod/schemas"
)

// buildPodctl compiles cmd/podctl once per test binary run.
func buildPodctl(t *testing.T) string {
	t.Helper()
	return podctlBinary.Build(t, binDir)
}

type podctlRun struct {
	stdout, stderr string
	err            error
}

func runPodctl(t *testing.T, bin string, env []string, args ...string) podctlRun {
	t.Helper()
	return runPodctlInput(t, bin, env, "", args...)
}

// runPodctlInput is runPodctl with stdin.
func runPodctlInput(t *testing.T, bin string, env []string, stdin string, args ...string) podctlRun {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return podctlRun{out.String(), errb.String(), err}
}

// TestPodctlAgainstRunningService drives podctl as an operator would, against
// a podsvc that runs the embedded broker on the same POD_DATA_DIR.
func TestPodctlAgainstRunningService(t *testing.T) {
	bin := buildPodctl(t)
	d := startDemo(t)
	env := d.podctlEnv()

	r := runPodctl(t, bin, env, "account", "create", "--name", "acme")
	if r.err != nil {
		t.Fatalf("account create: %v\n%s", r.err, r.stderr)
	}
	var acct struct {
		AccountID string `json:"account_id"`
		Token     string `json:"token"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &acct); err != nil || acct.AccountID == "" || !strings.HasPrefix(acct.Token, "pod_") {
		t.Fatalf("account create printed %q", r.stdout)
	}
	if r := runPodctl(t, bin, env, "account", "create", "--name", "acme"); r.err == nil || !strings.Contains(r.stderr, "already taken") {
		t.Fatalf("duplicate account name: %v %s", r.err, r.stderr)
	}

	file := filepath.Join(t.TempDir(), "catalog.json")
	if err := os.WriteFile(file, []byte(`{"stores":[{"name":"Acme Prints","shop_domain":"acme.myshopify.com","status":"ACTIVE","products":[
		{"title":"Acme Hoodie","status":"ACTIVE","platform_id":"acme-1","variants":[
			{"title":"M","sku":"AC-HD-M","price":"31.00","category":"hoodie"},
			{"title":"L","sku":"AC-HD-L","price":"31.00","category":"hoodie"}]},
		{"title":"Acme Tote","status":"ACTIVE","variants":[{"title":"One","sku":"AC-TT","price":"9.5","category":"tote","requires_yarn_type":[]}]}]}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	r = runPodctl(t, bin, env, "catalog", "import", "--account", acct.AccountID, file)
	if r.err != nil {
		t.Fatalf("catalog import: %v\n%s", r.err, r.stderr)
	}
	if !strings.Contains(r.stderr, "publishing") || !strings.Contains(r.stdout, `"projected": true`) {
		t.Fatalf("catalog import output:\nstdout %s\nstderr %s", r.stdout, r.stderr)
	}
	// import returns once the projection applied it: no polling needed.
	c := testenv.NewClient(t, "http://"+d.app.Addr(), acct.Token)
	var stores struct{ Data []catalogrm.Store }
	c.Get("/v1/stores").JSON(t, &stores)
	if len(stores.Data) != 1 || stores.Data[0].Name != "Acme Prints" {
		t.Fatalf("stores after import: %+v", stores.Data)
	}
	var products productPage
	c.Get("/v1/stores/"+stores.Data[0].StoreID.String()+"/products").JSON(t, &products)
	if len(products.Data) != 2 || products.Data[1].Variants[0].Price != "9.50" {
		t.Fatalf("products after import: %+v", products.Data)
	}

	// A create is priced from the catalog as it is now: the second import's
	// price reaches the next create once its projection commits (the
	// projector announces the change to the order catalog's cache).
	tote := products.Data[1].Variants[0].VariantID
	priced := func(ref string) string {
		t.Helper()
		r := c.Do("POST", "/v1/orders/pod", tshirtOrder(tote, ref, 1))
		var o struct {
			Pricing struct {
				Subtotal json.Number `json:"subtotal"`
			} `json:"pricing"`
		}
		r.JSON(t, &o)
		if r.Status != 201 {
			t.Fatalf("create a tote order: %d %s", r.Status, r.Body)
		}
		return o.Pricing.Subtotal.String()
	}
	if got := priced("tote-1"); got != "9.50" {
		t.Fatalf("tote priced at %s before the price change", got)
	}
	if err := os.WriteFile(file, bytes.ReplaceAll(must(os.ReadFile(file)), []byte(`"price":"9.5"`), []byte(`"price":"12.25"`)), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := runPodctl(t, bin, env, "catalog", "import", "--account", acct.AccountID, file); r.err != nil {
		t.Fatalf("second catalog import: %v\n%s", r.err, r.stderr)
	}
	n := 1
	// The API's price cache is dropped by a NOTIFY after the import; each
	// try is a create, which on a slow real cluster may take seconds.
	testenv.Eventually(t, 20*time.Second, func() error {
		n++
		if got := priced(fmt.Sprintf("tote-%d", n)); got != "12.25" {
			return fmt.Errorf("tote priced at %s after the price change", got)
		}
		return nil
	})

	r = runPodctl(t, bin, env, "token", "issue", "--account", acct.AccountID)
	var issued struct{ Token string }
	if r.err != nil || json.Unmarshal([]byte(r.stdout), &issued) != nil || issued.Token == "" {
		t.Fatalf("token issue: %v %s %s", r.err, r.stdout, r.stderr)
	}
	if got := testenv.NewClient(t, "http://"+d.app.Addr(), issued.Token).Get("/v1/stores"); got.Status != 200 {
		t.Fatalf("issued token: %d", got.Status)
	}
	if r := runPodctlInput(t, bin, env, "\n", "token", "revoke", "--token", "-"); r.err == nil || !strings.Contains(r.stderr, "no token on stdin") {
		t.Errorf("token revoke with nothing on stdin: %v %s", r.err, r.stderr)
	}
	// Read from stdin, the token stays out of the process list.
	if r := runPodctlInput(t, bin, env, issued.Token+"\n", "token", "revoke", "--token", "-"); r.err != nil {
		t.Fatalf("token revoke: %v %s", r.err, r.stderr)
	}
	testenv.Eventually(t, 2*time.Second, func() error { // the revocation is announced to the token cache
		if got := testenv.NewClient(t, "http://"+d.app.Addr(), issued.Token).Get("/v1/stores"); got.Status != 401 {
			return fmt.Errorf("revoked token: %d", got.Status)
		}
		return nil
	})
	if r := runPodctl(t, bin, env, "token", "revoke", "--token", issued.Token); r.err == nil {
		t.Fatal("revoking twice succeeded")
	}

	t.Run("bad inputs are explained", func(t *testing.T) {
		bad := filepath.Join(t.TempDir(), "bad.json")
		_ = os.WriteFile(bad, []byte(`{"stores":[{"name":"","shop_domain":"x","status":"OPEN","products":[{"title":"T","status":"ACTIVE","variants":[{"title":"v","sku":"S","price":"abc","category":"sock"}]}]}]}`), 0o644)
		r := runPodctl(t, bin, env, "catalog", "import", "--account", acct.AccountID, bad)
		for _, want := range []string{"stores[0].name", "stores[0].status", "stores[0].products[0].variants[0].price", "stores[0].products[0].variants[0].category"} {
			if r.err == nil || !strings.Contains(r.stderr, want) {
				t.Errorf("invalid catalog: error does not name %s:\n%s", want, r.stderr)
			}
		}
		r = runPodctl(t, bin, env, "token", "issue", "--account", "nope")
		if r.err == nil || !strings.Contains(r.stderr, "not a UUID") {
			t.Errorf("bad account id: %s", r.stderr)
		}
		other := []string{"DATABASE_URL=" + d.cfg.DatabaseURL, "POD_DATA_DIR=" + t.TempDir(), "KAFKA_BROKERS="}
		r = runPodctl(t, bin, other, "catalog", "import", "--account", acct.AccountID, file)
		if r.err == nil || !strings.Contains(r.stderr, "KAFKA_BROKERS") {
			t.Errorf("no broker: %s", r.stderr)
		}
	})
}

// TestPodctlCatalogImportRefusesForeignItems imports, for a new account,
// files naming the demo account's store, product or variant: the catalog
// projection would ignore those events, so podctl must fail (exit 1),
// naming each foreign item, and publish nothing.
func TestPodctlCatalogImportRefusesForeignItems(t *testing.T) {
	bin := buildPodctl(t)
	d := startDemo(t)
	env := d.podctlEnv()
	r := runPodctl(t, bin, env, "account", "create", "--name", "mallory")
	if r.err != nil {
		t.Fatalf("account create: %v\n%s", r.err, r.stderr)
	}
	var acct struct {
		AccountID string `json:"account_id"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &acct); err != nil {
		t.Fatal(err)
	}
	demo := d.stores[0]
	var products productPage
	d.client.Get("/v1/stores/"+demo.StoreID.String()+"/products?limit=1").JSON(t, &products)
	if len(products.Data) == 0 || len(products.Data[0].Variants) == 0 {
		t.Fatalf("demo store %s has no product with variants", demo.StoreID)
	}
	demoProduct := products.Data[0]

	files := []struct {
		name, body string
		want       []string
	}{
		{"store of another account", fmt.Sprintf(`{"stores":[{"store_id":%q,"name":"Taken","shop_domain":"taken.example","status":"ACTIVE",
			"products":[{"title":"T","status":"ACTIVE","variants":[{"title":"v","sku":"M-1","price":"1.00","category":"tote","requires_yarn_type":[]}]}]}]}`,
			demo.StoreID),
			[]string{"stores[0]: store " + demo.StoreID.String() + " belongs to account " + d.app.DemoAccount.String()}},
		{"product of another store", fmt.Sprintf(`{"stores":[{"name":"Mine","shop_domain":"mine.example","status":"ACTIVE",
			"products":[{"product_id":%q,"title":"T","status":"ACTIVE","variants":[{"title":"v","sku":"M-2","price":"1.00","category":"tote","requires_yarn_type":[]}]}]}]}`,
			demoProduct.ProductID),
			[]string{"stores[0].products[0]: product " + demoProduct.ProductID.String() + " belongs to store " + demo.StoreID.String()}},
		{"variant of another product", fmt.Sprintf(`{"stores":[{"name":"Mine","shop_domain":"mine.example","status":"ACTIVE",
			"products":[{"title":"T","status":"ACTIVE","variants":[{"variant_id":%q,"title":"v","sku":"M-3","price":"1.00","category":"tote","requires_yarn_type":[]}]}]}]}`,
			demoProduct.Variants[0].VariantID),
			[]string{"stores[0].products[0].variants[0]: variant " + demoProduct.Variants[0].VariantID.String() + " belongs to product " + demoProduct.ProductID.String()}},
	}
	before := topicSize(t, d.app.Brokers, d.topic(schemas.TopicCatalogEvents))
	for _, f := range files {
		path := filepath.Join(t.TempDir(), "catalog.json")
		if err := os.WriteFile(path, []byte(f.body), 0o644); err != nil {
			t.Fatal(err)
		}
		r := runPodctl(t, bin, env, "catalog", "import", "--quiet", "--account", acct.AccountID, path)
		var exit *exec.ExitError
		if !errors.As(r.err, &exit) || exit.ExitCode() != 1 {
			t.Errorf("%s: import ended with %v, want exit status 1\nstdout %s\nstderr %s", f.name, r.err, r.stdout, r.stderr)
			continue
		}
		for _, want := range append(f.want, "nothing was imported") {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("%s: stderr does not say %q:\n%s", f.name, want, r.stderr)
			}
		}
		if r.stdout != "" {
			t.Errorf("%s: a refused import printed a result: %s", f.name, r.stdout)
		}
	}
	if after := topicSize(t, d.app.Brokers, d.topic(schemas.TopicCatalogEvents)); after != before {
		t.Errorf("refused imports published %d catalog events", after-before)
	}
	var stores struct{ Data []catalogrm.Store }
	d.client.Get("/v1/stores").JSON(t, &stores)
	for _, s := range stores.Data {
		if s.StoreID == demo.StoreID && (s.Name != demo.Name || s.ShopDomain != demo.ShopDomain) {
			t.Errorf("the demo store changed: %+v, was %+v", s, demo)
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestAnArchivingImportWaitsForTheCatalogBeforeIt: an import with
// --archive-missing reads from the catalog projection what the file no
// longer lists. Found by review: run right after an import that added a
// product (with --wait 0) while the projection lagged, it did not see that
// product, archived nothing and said so. It now waits for the projection
// to apply every catalog event published before it.
func TestAnArchivingImportWaitsForTheCatalogBeforeIt(t *testing.T) {
	bin := buildPodctl(t)
	d := startDemo(t)
	env := d.podctlEnv()
	account, token := d.newAccount(t, "archiving-shop")
	dir := t.TempDir()
	file := func(name string, titles ...string) string {
		t.Helper()
		var ps []string
		for _, title := range titles {
			ps = append(ps, `{"title":"`+title+`","status":"ACTIVE","variants":[{"title":"M","sku":"`+title+`-M","price":"20","category":"tshirt"}]}`)
		}
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(`{"stores":[{"name":"Archiving","shop_domain":"archiving.myshopify.com","status":"ACTIVE",
			"products":[`+strings.Join(ps, ",")+`]}]}`), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	imp := func(args ...string) podctlRun {
		t.Helper()
		r := runPodctl(t, bin, env, append([]string{"catalog", "import", "--quiet", "--account", account.String()}, args...)...)
		if r.err != nil {
			t.Fatalf("catalog import %v: %v\n%s", args, r.err, r.stderr)
		}
		return r
	}
	imp(file("first.json", "Kept Tee"))

	release := stallProjector(t, d, "products")
	imp("--wait", "0", file("added.json", "Kept Tee", "New Tee"))

	// The archiving import waits for the projection, and says so.
	cmd := exec.Command(bin, "catalog", "import", "--account", account.String(), "--archive-missing", file("whole.json", "Kept Tee"))
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout = &out
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waiting := make(chan struct{})
	var errText strings.Builder
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(stderr)
		seen := false
		for sc.Scan() {
			errText.WriteString(sc.Text() + "\n")
			if !seen && strings.Contains(sc.Text(), "waiting for the catalog projection to apply earlier catalog events") {
				seen = true
				close(waiting)
			}
		}
	}()
	select {
	case <-waiting:
	case <-scanned:
		_ = cmd.Wait()
		t.Fatalf("the archiving import ended without waiting for the projection: %s\n%s", out.String(), errText.String())
	case <-time.After(30 * time.Second):
		t.Fatal("the archiving import printed nothing within 30 s")
	}
	release() // the projection catches up
	<-scanned
	if err := cmd.Wait(); err != nil {
		t.Fatalf("archiving import: %v\n%s", err, errText.String())
	}
	var res struct{ Archived int }
	if err := json.Unmarshal(out.Bytes(), &res); err != nil || res.Archived != 1 {
		t.Fatalf("archiving import printed %q (%v), want 1 archived", out.String(), err)
	}
	client := testenv.NewClient(t, "http://"+d.app.Addr(), token)
	var page struct{ Data []catalogrm.Product }
	client.Get("/v1/stores/"+catalog.StoreID(account, "archiving.myshopify.com").String()+"/products?limit=100").JSON(t, &page)
	statuses := map[string]string{}
	for _, p := range page.Data {
		statuses[p.Title] = p.Status
	}
	if statuses["New Tee"] != "ARCHIVED" || statuses["Kept Tee"] != "ACTIVE" {
		t.Fatalf("products after the archiving import: %v", statuses)
	}
}

// TestPodctlRefusesAWrongDatabaseAndGivesUpOnAnUnreachableKafka (found by
// review): podctl made and migrated whatever database DATABASE_URL named
// (a typo made an account whose token works nowhere), and a publish to a
// Kafka it could not reach waited for good, saying nothing.
func TestPodctlRefusesAWrongDatabaseAndGivesUpOnAnUnreachableKafka(t *testing.T) {
	waitsMostly(t)
	bin := buildPodctl(t)
	d := startDemo(t, fastPushes)

	typo := strings.Replace(d.cfg.DatabaseURL, "pod_test_", "pod_typo_", 1)
	r := runPodctl(t, bin, append(d.podctlEnv(), "DATABASE_URL="+typo), "account", "create", "--name", "typo")
	if r.err == nil || !strings.Contains(r.stderr, "does not exist") {
		t.Fatalf("account create on a database that does not exist: %v\nstdout %s\nstderr %s", r.err, r.stdout, r.stderr)
	}
	var made bool
	name := typo[strings.LastIndex(typo, "/")+1:]
	if err := d.app.Pool.QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&made); err != nil || made {
		t.Fatalf("database %s made by a refused command: %v (%v)", name, made, err)
	}

	// A port nothing listens on: the record never reaches a broker.
	closed := testenv.FreeAddr(t)
	v := d.variant(t, "ACTIVE", "tshirt")
	o := create(t, d.client, tshirtOrder(v.VariantID, "unreachable-1", 1))
	d.waitStatus(t, d.client, o.OrderID, schemas.StatusSuccess)
	start := time.Now()
	r = runPodctl(t, bin, append(d.podctlEnv(), "KAFKA_BROKERS="+closed), "fulfillment", "publish",
		"--order", o.OrderID.String(), "--status", "SYNCED")
	if r.err == nil {
		t.Fatalf("a publish to an unreachable Kafka succeeded: %s", r.stdout)
	}
	if took := time.Since(start); took > 2*time.Minute {
		t.Fatalf("the publish gave up after %s", took)
	}
	t.Logf("the publish gave up after %s: %s", time.Since(start).Round(time.Second), strings.TrimSpace(r.stderr))
}

// TestAnImportChecksOwnersOnACaughtUpCatalogOneAtATime (found by review):
// the owner check read the catalog projection as it was, so a store
// another account had just published, not projected yet, passed it, and
// the projector then dropped this file's store with "projected: true"
// printed; and two imports of one account interleaved their events.
func TestAnImportChecksOwnersOnACaughtUpCatalogOneAtATime(t *testing.T) {
	waitsMostly(t)
	bin := buildPodctl(t)
	d := startDemo(t)
	env := d.podctlEnv()
	first, _ := d.newAccount(t, "first-owner")
	second, _ := d.newAccount(t, "second-owner")
	store := uuid.New()
	path := filepath.Join(t.TempDir(), "shared-store.json")
	if err := os.WriteFile(path, []byte(`{"stores":[{"store_id":"`+store.String()+`","name":"Shared","shop_domain":"shared.myshopify.com","status":"ACTIVE",
		"products":[{"title":"Tee","status":"ACTIVE","variants":[{"title":"M","sku":"T-M","price":"20","category":"tshirt"}]}]}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	imp := func(account uuid.UUID, args ...string) podctlRun {
		t.Helper()
		return runPodctl(t, bin, env, append([]string{"catalog", "import", "--quiet", "--account", account.String()}, append(args, path)...)...)
	}

	release := stallProjector(t, d, "stores")
	if r := imp(first, "--wait", "0"); r.err != nil {
		t.Fatalf("the first owner's import: %v\n%s", r.err, r.stderr)
	}
	// The projection has not applied the first owner's store: the second
	// import waits for it rather than check owners without it.
	if r := imp(second, "--wait", "3s"); r.err == nil || !strings.Contains(r.stderr, "nothing was published") {
		t.Fatalf("an import while the catalog projection lags: %v\nstdout %s\nstderr %s", r.err, r.stdout, r.stderr)
	}
	release()
	if r := imp(second); r.err == nil || !strings.Contains(r.stderr, "belong elsewhere") {
		t.Fatalf("an import of another account's store: %v\nstdout %s\nstderr %s", r.err, r.stdout, r.stderr)
	}

	// An import of an account already under way (its lock held here).
	conn, err := d.app.Pool.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	var held bool
	if err := conn.QueryRow(t.Context(), `SELECT pg_try_advisory_lock(hashtextextended($1, 0))`,
		"podctl.catalog-import "+first.String()).Scan(&held); err != nil || !held {
		t.Fatalf("take the import lock: %v %v", held, err)
	}
	if r := imp(first); r.err == nil || !strings.Contains(r.stderr, "another catalog import of account") {
		t.Fatalf("an import while another of the account runs: %v\nstdout %s\nstderr %s", r.err, r.stdout, r.stderr)
	}
}
