// A chat page as an application would write it: the AI SDK's `useChat`,
// unmodified, over `DefaultChatTransport` (HTTP) or `WebSocketChatTransport`,
// talking to a toolserver on another origin. Everything it shows is in
// elements the browser test reads: the chat's status, its error, its
// messages as JSON, and what a stop request answered.
//
// The query string configures it: server, token, agent, chat (the
// conversation id), transport (`http` or `ws`), resume (`1`: resume on mount),
// load (`1`: start from the conversation as the server stores it, as an
// application reopening a chat would).
import { useMemo, useState } from 'react';
import { createRoot } from 'react-dom/client';
import { useChat } from '@ai-sdk/react';
import { DefaultChatTransport, WebSocketChatTransport } from 'ai';

const params = new URLSearchParams(window.location.search);
const server = params.get('server');
const token = params.get('token');
const agentId = params.get('agent');
const chatId = params.get('chat');
const overSocket = params.get('transport') === 'ws';
const resume = params.get('resume') === '1';
const load = params.get('load') === '1';

function makeTransport() {
  if (overSocket) {
    return new WebSocketChatTransport({
      url: `${server.replace(/^http/, 'ws')}/agents/${agentId}/ws`,
      protocols: ['toolserver.chat.v1', `bearer.${token}`],
    });
  }
  return new DefaultChatTransport({
    api: `${server}/agents/${agentId}/chat`,
    headers: { authorization: `Bearer ${token}` },
  });
}

async function stopTurn() {
  const answer = await fetch(`${server}/agents/${agentId}/chat/${encodeURIComponent(chatId)}/stop`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}` },
  });
  return String(answer.status);
}

// The conversation's stored messages (none when it does not exist yet).
async function storedMessages() {
  const answer = await fetch(`${server}/conversations/${encodeURIComponent(chatId)}`, {
    headers: { authorization: `Bearer ${token}` },
  });
  return answer.ok ? (await answer.json()).messages : [];
}

function App({ initial }) {
  const transport = useMemo(makeTransport, []);
  const { messages, sendMessage, status, error } = useChat({ id: chatId, transport, resume, messages: initial });
  const [input, setInput] = useState('');
  const [stopped, setStopped] = useState('');
  const submit = (event) => {
    event.preventDefault();
    sendMessage({ text: input });
    setInput('');
  };
  return (
    <main>
      <form onSubmit={submit}>
        <input id="input" value={input} onChange={(event) => setInput(event.target.value)} />
        <button id="send" type="submit">Send</button>
      </form>
      <button id="stop" type="button" onClick={() => stopTurn().then(setStopped)}>Stop</button>
      <output id="stopped">{stopped}</output>
      <output id="status">{status}</output>
      <output id="error">{error ? error.message : ''}</output>
      <pre id="messages">{JSON.stringify(messages)}</pre>
    </main>
  );
}

(load ? storedMessages() : Promise.resolve(undefined)).then((initial) => {
  createRoot(document.getElementById('root')).render(<App initial={initial} />);
});
