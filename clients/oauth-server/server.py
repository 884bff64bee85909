"""A real OAuth 2.1 authorization server for the toolserver's tests.

Built on Authlib's Flask integration: the authorization code grant with PKCE
(S256 only, required of every client) and the refresh token grant with
rotation, for one confidential client named on the command line. Everything
lives in memory. There is no login page: the end user is named by a `user`
query parameter that the test appends to the authorize URL, and consents at
once. Beside the OAuth endpoints it serves a protected resource (`/api/me`)
and two admin endpoints the tests use to revoke a user's grants and to count
what the token endpoint gave.

    python server.py --client-id ID --client-secret SECRET --access-ttl SECONDS [--port 0]

Once listening it prints `listening on http://127.0.0.1:PORT` to stdout; it
logs requests to stderr.
"""

import argparse
import logging
import secrets
import sys
import threading
import time
from collections import Counter
from urllib.parse import urlsplit

from authlib.integrations.flask_oauth2 import AuthorizationServer
from authlib.oauth2 import OAuth2Error
from authlib.oauth2.rfc6749 import (
    AuthorizationCodeMixin,
    ClientMixin,
    InvalidRequestError,
    TokenMixin,
    grants,
)
from authlib.oauth2.rfc7636 import CodeChallenge
from flask import Flask, Response, jsonify, request
from werkzeug.serving import WSGIRequestHandler, make_server

AUTH_METHODS = ["client_secret_basic", "client_secret_post"]
CODE_TTL = 600

lock = threading.Lock()
codes = {}  # code -> AuthorizationCode
tokens = []  # every Token issued, in order
answers = Counter()  # grant type -> successful token answers
users = set()  # users who got tokens


class Client(ClientMixin):
    """The one confidential client: any scope, any http loopback redirect."""

    def __init__(self, client_id, client_secret):
        self.client_id = client_id
        self.client_secret = client_secret

    def get_client_id(self):
        return self.client_id

    def get_default_redirect_uri(self):
        return None

    def get_allowed_scope(self, scope):
        return scope or ""

    def check_redirect_uri(self, redirect_uri):
        parts = urlsplit(redirect_uri)
        return parts.scheme == "http" and parts.hostname in ("127.0.0.1", "localhost")

    def check_client_secret(self, client_secret):
        return secrets.compare_digest(self.client_secret, client_secret)

    def check_endpoint_auth_method(self, method, endpoint):
        return method in AUTH_METHODS

    def check_response_type(self, response_type):
        return response_type == "code"

    def check_grant_type(self, grant_type):
        return grant_type in ("authorization_code", "refresh_token")


class AuthorizationCode(AuthorizationCodeMixin):
    def __init__(self, client_id, redirect_uri, scope, user, challenge, method):
        self.client_id = client_id
        self.redirect_uri = redirect_uri
        self.scope = scope
        self.user = user
        self.code_challenge = challenge
        self.code_challenge_method = method
        self.issued_at = time.time()

    def get_redirect_uri(self):
        return self.redirect_uri

    def get_scope(self):
        return self.scope


class Token(TokenMixin):
    """An access token and its refresh token, revoked apart."""

    def __init__(self, client_id, user, answer):
        self.client_id = client_id
        self.user = user
        self.access_token = answer["access_token"]
        self.refresh_token = answer.get("refresh_token")
        self.scope = answer.get("scope", "")
        self.expires_in = answer["expires_in"]
        self.issued_at = time.time()
        self.access_revoked = False
        self.refresh_revoked = False

    def check_client(self, client):
        return self.client_id == client.get_client_id()

    def get_scope(self):
        return self.scope

    def get_expires_in(self):
        return self.expires_in

    def is_expired(self):
        return time.time() >= self.issued_at + self.expires_in

    def is_revoked(self):
        return self.access_revoked

    def get_user(self):
        return self.user

    def get_client(self):
        return client


class S256Challenge(CodeChallenge):
    """PKCE with S256, required at the authorization endpoint of every client.

    Authlib's `CodeChallenge(required=True)` insists on a verifier only from
    public clients and lets a request without a challenge through; OAuth 2.1
    wants PKCE of confidential clients too, so a missing challenge and any
    method but S256 are refused (a redirect with `error=invalid_request`).
    """

    SUPPORTED_CODE_CHALLENGE_METHOD = ["S256"]

    def validate_code_challenge(self, grant, redirect_uri):
        data = grant.request.payload.data
        if not data.get("code_challenge"):
            raise InvalidRequestError("Missing 'code_challenge'")
        if data.get("code_challenge_method") != "S256":
            raise InvalidRequestError("'code_challenge_method' must be S256")
        super().validate_code_challenge(grant, redirect_uri)


class AuthorizationCodeGrant(grants.AuthorizationCodeGrant):
    TOKEN_ENDPOINT_AUTH_METHODS = AUTH_METHODS

    def save_authorization_code(self, code, request):
        data = request.payload.data
        with lock:
            codes[code] = AuthorizationCode(
                request.client.get_client_id(),
                request.payload.redirect_uri,
                request.scope,
                request.user,
                data.get("code_challenge"),
                data.get("code_challenge_method"),
            )

    def query_authorization_code(self, code, client):
        with lock:
            item = codes.get(code)
        if item and item.client_id == client.get_client_id():
            if time.time() < item.issued_at + CODE_TTL:
                return item
        return None

    def delete_authorization_code(self, authorization_code):
        with lock:
            for code, item in list(codes.items()):
                if item is authorization_code:
                    del codes[code]

    def authenticate_user(self, authorization_code):
        return authorization_code.user


class RefreshTokenGrant(grants.RefreshTokenGrant):
    TOKEN_ENDPOINT_AUTH_METHODS = AUTH_METHODS
    INCLUDE_NEW_REFRESH_TOKEN = True

    def authenticate_refresh_token(self, refresh_token):
        with lock:
            for token in tokens:
                if token.refresh_token == refresh_token and not token.refresh_revoked:
                    return token
        return None

    def authenticate_user(self, refresh_token):
        return refresh_token.user

    def revoke_old_credential(self, refresh_token):
        with lock:
            refresh_token.refresh_revoked = True


def save_token(answer, request):
    with lock:
        tokens.append(Token(request.client.get_client_id(), request.user, answer))
        answers[request.payload.grant_type] += 1
        users.add(request.user)


app = Flask(__name__)
server = AuthorizationServer()
client = None


@app.get("/authorize")
def authorize():
    user = request.args.get("user")
    if not user:
        return Response("missing 'user': name the end user with ?user=NAME\n", 400, mimetype="text/plain")
    try:
        grant = server.get_consent_grant(end_user=user)
    except OAuth2Error as error:
        return server.handle_error_response(None, error)
    return server.create_authorization_response(grant=grant, grant_user=user)


@app.post("/token")
def issue_token():
    return server.create_token_response()


@app.get("/api/me")
def me():
    scheme, _, value = request.headers.get("Authorization", "").partition(" ")
    with lock:
        token = next((t for t in tokens if t.access_token == value), None)
    if scheme.lower() != "bearer" or not token or token.is_revoked() or token.is_expired():
        answer = jsonify(error="invalid_token")
        answer.status_code = 401
        answer.headers["WWW-Authenticate"] = 'Bearer error="invalid_token"'
        return answer
    return jsonify(user=token.user, scope=token.scope)


@app.post("/admin/revoke")
def revoke():
    """Revokes every token of `user`; answers how many live refresh tokens it revoked."""
    user = request.args.get("user", "")
    revoked = 0
    with lock:
        for token in tokens:
            if token.user == user:
                revoked += not token.refresh_revoked
                token.refresh_revoked = token.access_revoked = True
    return jsonify(revoked=revoked)


@app.get("/admin/stats")
def stats():
    with lock:
        return jsonify(
            authorization_code=answers["authorization_code"],
            refresh_token=answers["refresh_token"],
            users=sorted(users),
        )


@app.get("/admin/tokens")
def issued():
    """Every access and refresh token issued, so tests can look for them where they must not be."""
    with lock:
        secrets = [t.access_token for t in tokens] + [t.refresh_token for t in tokens if t.refresh_token]
        return jsonify(tokens=secrets)


class PlainLog(WSGIRequestHandler):
    """Logs each request as werkzeug does, without terminal colours."""

    def log_request(self, code="-", size="-"):
        self.log("info", '"%s" %s %s', self.requestline, code, size)


def main():
    global client
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--client-id", required=True)
    parser.add_argument("--client-secret", required=True)
    parser.add_argument("--access-ttl", type=int, required=True, help="access token lifetime, seconds")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    args = parser.parse_args()

    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(message)s")
    client = Client(args.client_id, args.client_secret)
    app.config["OAUTH2_REFRESH_TOKEN_GENERATOR"] = True
    app.config["OAUTH2_TOKEN_EXPIRES_IN"] = {
        "authorization_code": args.access_ttl,
        "refresh_token": args.access_ttl,
    }
    server.init_app(
        app,
        query_client=lambda client_id: client if client_id == client.client_id else None,
        save_token=save_token,
    )
    server.register_grant(AuthorizationCodeGrant, [S256Challenge(required=True)])
    server.register_grant(RefreshTokenGrant)

    http = make_server("127.0.0.1", args.port, app, threaded=True, request_handler=PlainLog)
    print(f"listening on http://127.0.0.1:{http.server_port}", flush=True)
    http.serve_forever()


if __name__ == "__main__":
    main()
