// Package kubetest runs a real Kubernetes API server in process for tests: Kubernetes'
// own kube-apiserver (its test server, which serves every built-in kind — ConfigMaps,
// Services, coordination.k8s.io Leases — and CustomResourceDefinitions) on 127.0.0.1,
// storing in an embedded etcd, with Knative Eventing's CRDs (testdata/crds, from
// knative/eventing) installed. Start it once per test package, in TestMain.
package kubetest

import (
	"context"
	"embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"

	etcdembed "go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/klog/v2"
	kubeapiserver "k8s.io/kubernetes/cmd/kube-apiserver/app/testing"
	"sigs.k8s.io/yaml"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

//go:embed testdata/crds/*.yaml
var crds embed.FS

// StartTimeout bounds the start of the etcd and of the API server, and the wait for the
// CRDs to be served: a bound on a hang, not a measure.
const StartTimeout = 2 * time.Minute

// Server is an API server and its etcd.
type Server struct {
	// Config is a client configuration with every right (the server's loopback
	// identity).
	Config *rest.Config
	// Kubeconfig is a kubeconfig file for Config, for a process such as `sluice serve
	// --kubeconfig`.
	Kubeconfig string

	failed   string // why Main could not start it
	dir      string
	etcd     *etcdembed.Etcd
	tb       *mainTB
	teardown func()
}

// Start starts etcd and the API server, with their files in a new directory under
// os.TempDir(), and installs the Knative CRDs; logs go to logs (io.Discard for none).
// Stop ends them.
func Start(logs io.Writer) (s *Server, err error) {
	dir, err := os.MkdirTemp("", "kubetest")
	if err != nil {
		return nil, fmt.Errorf("kubetest: %w", err)
	}
	s = &Server{dir: dir}
	defer func() {
		if err != nil {
			s.Stop()
		}
	}()
	// The API server logs through klog; keep it out of the test output (errors too:
	// klog copies them to standard error below its stderrthreshold).
	kfl := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(kfl)
	for k, v := range map[string]string{"logtostderr": "false", "alsologtostderr": "false", "stderrthreshold": "FATAL"} {
		if err := kfl.Set(k, v); err != nil {
			return s, fmt.Errorf("kubetest: klog: %w", err)
		}
	}
	klog.SetOutput(logs)
	if s.etcd, err = startEtcd(filepath.Join(dir, "etcd")); err != nil {
		return s, err
	}
	sc := storagebackend.NewDefaultConfig("/registry", nil)
	sc.Transport.ServerList = []string{s.etcd.Clients[0].Addr().String()}
	sc.Transport.ServerList[0] = "http://" + sc.Transport.ServerList[0]
	s.tb = newMainTB(filepath.Join(dir, "tb"), logs)
	type started struct {
		ts  kubeapiserver.TestServer
		err error
	}
	done := make(chan started, 1)
	go func() { // the test server calls FailNow (runtime.Goexit) on some errors
		defer func() {
			select {
			case done <- started{err: errors.New("kubetest: the API server failed to start: " + s.tb.failure())}:
			default:
			}
		}()
		ts, err := kubeapiserver.StartTestServer(s.tb, &kubeapiserver.TestServerInstanceOptions{DisableInvariantChecks: true},
			[]string{"--disable-admission-plugins=ServiceAccount", "--bind-address=127.0.0.1", "--authorization-mode=RBAC"}, sc)
		done <- started{ts, err}
	}()
	var st started
	select {
	case st = <-done:
	case <-time.After(StartTimeout):
		return s, fmt.Errorf("kubetest: the API server did not start within %v", StartTimeout)
	}
	if st.err != nil {
		return s, fmt.Errorf("kubetest: %w", st.err)
	}
	s.teardown = st.ts.TearDownFn
	s.Config = rest.CopyConfig(st.ts.ClientConfig)
	s.Config.QPS, s.Config.Burst = 200, 400 // tests create objects quickly
	if s.Kubeconfig, err = writeKubeconfig(filepath.Join(dir, "kubeconfig"), s.Config, ""); err != nil {
		return s, err
	}
	if err := s.installCRDs(); err != nil {
		return s, err
	}
	return s, nil
}

// Stop ends the API server and etcd and removes their files.
func (s *Server) Stop() {
	if s.teardown != nil {
		s.teardown()
	}
	if s.tb != nil {
		s.tb.cleanup()
	}
	if s.etcd != nil {
		s.etcd.Close()
	}
	os.RemoveAll(s.dir)
}

// Dynamic returns a dynamic client of the server.
func (s *Server) Dynamic() dynamic.Interface { return dynamic.NewForConfigOrDie(s.Config) }

// freePorts returns n ports free on 127.0.0.1 now.
func freePorts(n int) ([]int, error) {
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// startEtcd starts a single-member etcd on 127.0.0.1 storing in dir.
func startEtcd(dir string) (*etcdembed.Etcd, error) {
	var lastErr error
	for range 3 { // a port taken between freePorts and the listen: try other ports
		ports, err := freePorts(2)
		if err != nil {
			return nil, fmt.Errorf("kubetest: etcd: %w", err)
		}
		cfg := etcdembed.NewConfig()
		cfg.Dir = dir
		cfg.UnsafeNoFsync = true // a test's data is never kept
		client := url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(ports[0])}
		peer := url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(ports[1])}
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
		cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
		cfg.ZapLoggerBuilder = etcdembed.NewZapLoggerBuilder(zap.NewNop())
		e, err := etcdembed.StartEtcd(cfg)
		if err != nil {
			lastErr = err
			os.RemoveAll(dir)
			continue
		}
		select {
		case <-e.Server.ReadyNotify():
			return e, nil
		case <-time.After(StartTimeout):
			e.Close()
			return nil, fmt.Errorf("kubetest: etcd did not start within %v", StartTimeout)
		}
	}
	return nil, fmt.Errorf("kubetest: etcd: %w", lastErr)
}

// KubeconfigAs writes a kubeconfig file for Config that acts as user (impersonated,
// e.g. "system:serviceaccount:NS:NAME"): a client with that user's rights (the server
// authorizes with RBAC), for a process such as `sluice serve --kubeconfig`.
func (s *Server) KubeconfigAs(user string) (string, error) {
	f, err := os.CreateTemp(s.dir, "kubeconfig-as-*")
	if err != nil {
		return "", fmt.Errorf("kubetest: %w", err)
	}
	f.Close()
	return writeKubeconfig(f.Name(), s.Config, user)
}

// writeKubeconfig writes a kubeconfig file for c at path, impersonating user if not "".
func writeKubeconfig(path string, c *rest.Config, user string) (string, error) {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["kubetest"] = &clientcmdapi.Cluster{
		Server:                   c.Host,
		CertificateAuthorityData: c.CAData,
		TLSServerName:            c.ServerName,
		InsecureSkipTLSVerify:    c.Insecure,
	}
	kc.AuthInfos["kubetest"] = &clientcmdapi.AuthInfo{Token: c.BearerToken,
		ClientCertificateData: c.CertData, ClientKeyData: c.KeyData, Impersonate: user}
	kc.Contexts["kubetest"] = &clientcmdapi.Context{Cluster: "kubetest", AuthInfo: "kubetest"}
	kc.CurrentContext = "kubetest"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return "", fmt.Errorf("kubetest: kubeconfig: %w", err)
	}
	return path, nil
}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// installCRDs creates the CRDs of testdata/crds and waits until each is established.
func (s *Server) installCRDs() error {
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	dyn := s.Dynamic()
	files, err := fs.Glob(crds, "testdata/crds/*.yaml")
	if err != nil {
		return fmt.Errorf("kubetest: %w", err)
	}
	var names []string
	for _, f := range files {
		b, err := crds.ReadFile(f)
		if err != nil {
			return fmt.Errorf("kubetest: %w", err)
		}
		var u unstructured.Unstructured
		if err := yaml.Unmarshal(b, &u.Object); err != nil {
			return fmt.Errorf("kubetest: %s: %w", f, err)
		}
		if _, err := dyn.Resource(crdGVR).Create(ctx, &u, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("kubetest: creating the CRD of %s: %w", f, err)
		}
		names = append(names, u.GetName())
	}
	for _, n := range names {
		err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			u, err := dyn.Resource(crdGVR).Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			for _, c := range conds {
				if m, ok := c.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("kubetest: CRD %s not established: %w", n, err)
		}
	}
	return nil
}

// Main runs a test package's tests with a Server started for them (set in *s) and
// returns the exit code: for TestMain, `os.Exit(kubetest.Main(m, &srv))`. If the server
// does not start, the tests fail under CI=true and are skipped elsewhere (s stays nil:
// tests call Need).
func Main(m interface{ Run() int }, s **Server) int {
	logf, err := os.CreateTemp("", "kubetest-*.log")
	if err != nil {
		log.Printf("kubetest: %v", err)
		return 1
	}
	defer os.Remove(logf.Name())
	defer logf.Close()
	t0 := time.Now()
	srv, err := Start(logf)
	if err != nil {
		if os.Getenv("CI") == "true" {
			log.Printf("%v (its log: %s)", err, logf.Name())
			return 1
		}
		log.Printf("kubetest: no API server, its tests skip: %v", err)
		*s = &Server{failed: err.Error()}
		return m.Run()
	}
	log.Printf("kubetest: API server with etcd and the Knative CRDs on %s in %v", srv.Config.Host, time.Since(t0).Round(time.Millisecond))
	*s = srv
	code := m.Run()
	t1 := time.Now()
	srv.Stop()
	log.Printf("kubetest: API server stopped in %v", time.Since(t1).Round(time.Millisecond))
	return code
}

// Need skips t if Main could not start the server (outside CI).
func Need(t interface{ Skipf(string, ...any) }, s *Server) {
	switch {
	case s == nil:
		t.Skipf("no API server: kubetest.Main did not run")
	case s.failed != "":
		t.Skipf("no API server: %s", s.failed)
	}
}
