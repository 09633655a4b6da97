package http

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"
)

// TestAnIdleNewConnectionIsClosedWithoutAnAnswer: a connection that sends
// no request within the read timeout is closed without a word (an answer
// nobody asked for could be read as the response to the client's next
// request), while a request sent in time is answered as usual.
func TestAnIdleNewConnectionIsClosedWithoutAnAnswer(t *testing.T) {
	s := &Server{Log: slog.New(slog.DiscardHandler), ReadTimeout: 300 * time.Millisecond}
	app := s.OpsApp()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = app.Listener(ln) }()
	t.Cleanup(func() { _ = app.Shutdown() })

	for _, tc := range []struct {
		name, send, want string
	}{
		{"a connection that sends nothing gets no answer", "", ""},
		{"a request sent in time is answered", "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", "HTTP/1.1 200 OK"},
		{"a request cut short within its headers is answered", "GET /healthz HTTP/1.1\r\nHost: x\r\n", "HTTP/1.1 400 Bad Request"},
		{"a request whose body stalls is answered", "POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nab",
			"HTTP/1.1 400 Bad Request"},
		{"a malformed request whose header says timeout is answered", "GET /healthz HTTP/1.1\r\nKeep-Alive: timeout=5\r\n\r\n",
			"HTTP/1.1 400 Bad Request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if tc.send != "" {
				if _, err := io.WriteString(conn, tc.send); err != nil {
					t.Fatal(err)
				}
			}
			// The server closes the idle connection after its read timeout;
			// the deadline only bounds a server that never does.
			_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			line, err := bufio.NewReader(conn).ReadString('\n')
			got := strings.TrimSpace(line)
			if got != tc.want {
				t.Fatalf("first line %q (read error %v), want %q", got, err, tc.want)
			}
			if tc.want == "" && err != io.EOF {
				t.Fatalf("the connection was not closed: %v", err)
			}
		})
	}
}
